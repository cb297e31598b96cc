/*
Copyright 2018 The Knative Authors

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Command knative-serving runs Knative Serving's controller and webhook (knative.dev/serving
// v0.50.0 cmd/controller and cmd/webhook) in one process, for the dispatcher dev fleet.
//
// The controller list, the cert-manager check and the three admission controllers are
// upstream's, copied unchanged (see ../../README.md). What differs, and why:
//   - one process: sharedmain runs controllers and admission controllers alike, so the
//     webhook's constructors are appended to the controller's;
//   - no certificates controller: the Secret webhook-certs is issued by the dev fleet's CA
//     for 127.0.0.1 and must not be replaced by one for webhook.knative-serving.svc;
//   - sharedmain's health probes (a constant port, 8080) are off; -health-address serves
//     /readyz on loopback instead, 200 once the webhook port completes a TLS handshake
//     with the certificate from webhook-certs (the informers have synced by then);
//   - HA (leader election over buckets) is off: one replica per member;
//   - the webhook's drain on SIGTERM lasts 1 s, not 45 s: nothing load-balances between
//     replicas here, and a member stops as a whole.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	netcfg "knative.dev/networking/pkg/config"
	"knative.dev/pkg/configmap"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/injection"
	"knative.dev/pkg/injection/sharedmain"
	"knative.dev/pkg/leaderelection"
	"knative.dev/pkg/logging"
	"knative.dev/pkg/reconciler"
	"knative.dev/pkg/signals"
	"knative.dev/pkg/system"
	"knative.dev/pkg/webhook"
	"knative.dev/pkg/webhook/configmaps"
	"knative.dev/pkg/webhook/resourcesemantics"
	"knative.dev/pkg/webhook/resourcesemantics/defaulting"
	"knative.dev/pkg/webhook/resourcesemantics/validation"
	"knative.dev/serving/pkg/networking"
	"knative.dev/serving/pkg/reconciler/certificate"
	"knative.dev/serving/pkg/reconciler/configuration"
	"knative.dev/serving/pkg/reconciler/domainmapping"
	"knative.dev/serving/pkg/reconciler/gc"
	"knative.dev/serving/pkg/reconciler/labeler"
	"knative.dev/serving/pkg/reconciler/nscert"
	"knative.dev/serving/pkg/reconciler/revision"
	"knative.dev/serving/pkg/reconciler/route"
	"knative.dev/serving/pkg/reconciler/serverlessservice"
	"knative.dev/serving/pkg/reconciler/service"

	versioned "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"knative.dev/serving/pkg/client/certmanager/injection/informers/acme/v1/challenge"
	v1certificate "knative.dev/serving/pkg/client/certmanager/injection/informers/certmanager/v1/certificate"
	"knative.dev/serving/pkg/client/certmanager/injection/informers/certmanager/v1/certificaterequest"
	"knative.dev/serving/pkg/client/certmanager/injection/informers/certmanager/v1/clusterissuer"
	"knative.dev/serving/pkg/client/certmanager/injection/informers/certmanager/v1/issuer"

	servingv1beta1 "knative.dev/serving/pkg/apis/serving/v1beta1"
	o11yconfigmap "knative.dev/serving/pkg/observability/configmap"
	certconfig "knative.dev/serving/pkg/reconciler/certificate/config"

	// resource validation types
	net1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	autoscalingv1alpha1 "knative.dev/serving/pkg/apis/autoscaling/v1alpha1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	extravalidation "knative.dev/serving/pkg/webhook"

	// config validation constructors
	apisconfig "knative.dev/serving/pkg/apis/config"
	autoscalerconfig "knative.dev/serving/pkg/autoscaler/config"
	"knative.dev/serving/pkg/deployment"
	gcconfig "knative.dev/serving/pkg/gc"
	domainconfig "knative.dev/serving/pkg/reconciler/route/config"
)

// --- cmd/controller/main.go (upstream) ---

var ctors = []injection.ControllerConstructor{
	configuration.NewController,
	labeler.NewController,
	revision.NewController,
	route.NewController,
	serverlessservice.NewController,
	service.NewController,
	gc.NewController,
	nscert.NewController,
	domainmapping.NewController,
}

func shouldEnableNetCertManagerController(ctx context.Context, client *kubernetes.Clientset) bool {
	var cm *v1.ConfigMap
	var err error
	if cm, err = client.CoreV1().ConfigMaps(system.Namespace()).Get(ctx, "config-network", metav1.GetOptions{}); err != nil {
		log.Fatalf("Failed to get cm config-network: %v", err)
	}
	netCfg, err := netcfg.NewConfigFromMap(cm.Data)
	if err != nil {
		log.Fatalf("Failed to construct network config: %v", err)
	}

	return networking.IsNetCertManagerControllerRequired(netCfg)
}

func certManagerCRDsExist(client *versioned.Clientset) (bool, error) {
	if ok, err := findCRD(client, "cert-manager.io/v1", []string{"certificaterequests", "certificates", "clusterissuers", "issuers"}); !ok {
		return false, err
	}
	if ok, err := findCRD(client, "acme.cert-manager.io/v1", []string{"challenges"}); !ok {
		return false, err
	}
	return true, nil
}

func findCRD(client *versioned.Clientset, groupVersion string, crds []string) (bool, error) {
	resourceList, err := client.Discovery().ServerResourcesForGroupVersion(groupVersion)
	if err != nil {
		return false, err
	}
	for _, crdName := range crds {
		isCRDPresent := false
		for _, resource := range resourceList.APIResources {
			if resource.Name == crdName {
				isCRDPresent = true
			}
		}
		if !isCRDPresent {
			return false, fmt.Errorf("cert manager crds are missing: %s", crdName)
		}
	}
	return true, nil
}

// --- cmd/webhook/main.go (upstream) ---

var types = map[schema.GroupVersionKind]resourcesemantics.GenericCRD{
	servingv1.SchemeGroupVersion.WithKind("Revision"):      &servingv1.Revision{},
	servingv1.SchemeGroupVersion.WithKind("Configuration"): &servingv1.Configuration{},
	servingv1.SchemeGroupVersion.WithKind("Route"):         &servingv1.Route{},
	servingv1.SchemeGroupVersion.WithKind("Service"):       &servingv1.Service{},

	autoscalingv1alpha1.SchemeGroupVersion.WithKind("PodAutoscaler"): &autoscalingv1alpha1.PodAutoscaler{},
	autoscalingv1alpha1.SchemeGroupVersion.WithKind("Metric"):        &autoscalingv1alpha1.Metric{},

	net1.SchemeGroupVersion.WithKind("Certificate"):       &net1.Certificate{},
	net1.SchemeGroupVersion.WithKind("Ingress"):           &net1.Ingress{},
	net1.SchemeGroupVersion.WithKind("ServerlessService"): &net1.ServerlessService{},

	servingv1beta1.SchemeGroupVersion.WithKind("DomainMapping"): &servingv1beta1.DomainMapping{},
}

var serviceValidation = validation.NewCallback(
	extravalidation.ValidateService, webhook.Create, webhook.Update)

var configValidation = validation.NewCallback(
	extravalidation.ValidateConfiguration, webhook.Create, webhook.Update)

var callbacks = map[schema.GroupVersionKind]validation.Callback{
	servingv1.SchemeGroupVersion.WithKind("Service"):       serviceValidation,
	servingv1.SchemeGroupVersion.WithKind("Configuration"): configValidation,
}

func newDefaultingAdmissionController(ctx context.Context, cmw configmap.Watcher) *controller.Impl {
	store := apisconfig.NewStore(logging.FromContext(ctx).Named("config-store"))
	store.WatchConfigs(cmw)
	return defaulting.NewAdmissionController(ctx,
		"webhook.serving.knative.dev", "/defaulting", types, store.ToContext, false)
}

func newValidationAdmissionController(ctx context.Context, cmw configmap.Watcher) *controller.Impl {
	store := apisconfig.NewStore(logging.FromContext(ctx).Named("config-store"))
	store.WatchConfigs(cmw)
	return validation.NewAdmissionController(ctx,
		"validation.webhook.serving.knative.dev", "/resource-validation", types,
		store.ToContext, false, callbacks)
}

func newConfigValidationController(ctx context.Context, cmw configmap.Watcher) *controller.Impl {
	return configmaps.NewAdmissionController(ctx,
		"config.webhook.serving.knative.dev", "/config-validation",
		configmap.Constructors{
			autoscalerconfig.ConfigName:      autoscalerconfig.NewConfigFromConfigMap,
			gcconfig.ConfigName:              gcconfig.NewConfigFromConfigMapFunc(ctx),
			netcfg.ConfigMapName:             netcfg.NewConfigFromConfigMap,
			deployment.ConfigName:            deployment.NewConfigFromConfigMap,
			apisconfig.FeaturesConfigName:    apisconfig.NewFeaturesConfigFromConfigMap,
			o11yconfigmap.Name():             o11yconfigmap.Parse,
			logging.ConfigMapName():          logging.NewConfigFromConfigMap,
			leaderelection.ConfigMapName():   leaderelection.NewConfigFromConfigMap,
			domainconfig.DomainConfigName:    domainconfig.NewDomainFromConfigMap,
			apisconfig.DefaultsConfigName:    apisconfig.NewDefaultsConfigFromConfigMap,
			certconfig.CertManagerConfigName: certconfig.NewCertManagerConfigFromConfigMap,
		},
	)
}

// --- the dev fleet's additions ---

// serveReadiness answers /readyz with 200 once the webhook port completes a TLS handshake.
func serveReadiness(address string, webhookPort int) {
	target := fmt.Sprintf("127.0.0.1:%d", webhookPort)
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		dialer := &net.Dialer{Timeout: 2 * time.Second}
		// Only "is a certificate served yet": the apiserver verifies it against the CA.
		conn, err := tls.DialWithDialer(dialer, "tcp", target, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_ = conn.Close()
		w.WriteHeader(http.StatusOK)
	})
	server := &http.Server{Addr: address, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(server.ListenAndServe())
}

func main() {
	healthAddress := flag.String("health-address", "127.0.0.1:8081",
		"Loopback address of /readyz (200 once the webhook serves its certificate).")
	flag.DurationVar(&reconciler.DefaultTimeout,
		"reconciliation-timeout", reconciler.DefaultTimeout,
		"The amount of time to give each reconciliation of a resource to complete before its context is canceled.")

	//nolint:gosec // not a leaked secret
	options := webhook.Options{
		ServiceName: webhook.NameFromEnv(),
		Port:        webhook.PortFromEnv(8443),
		SecretName:  "webhook-certs",
		GracePeriod: time.Second,
	}
	ctx := webhook.WithOptions(signals.NewContext(), options)
	ctx = sharedmain.WithHealthProbesDisabled(ctx)
	ctx = sharedmain.WithHADisabled(ctx)

	// HACK (upstream's): this parses flags, so the above are set once it returns.
	cfg := injection.ParseAndGetRESTConfigOrDie()
	client := kubernetes.NewForConfigOrDie(cfg)

	if shouldEnableNetCertManagerController(ctx, client) {
		v := versioned.NewForConfigOrDie(cfg)
		if ok, err := certManagerCRDsExist(v); !ok {
			log.Fatalf("Please install cert-manager: %v", err)
		}
		for _, inf := range []injection.InformerInjector{challenge.WithInformer, v1certificate.WithInformer, certificaterequest.WithInformer, clusterissuer.WithInformer, issuer.WithInformer} {
			injection.Default.RegisterInformer(inf)
		}
		ctors = append(ctors, certificate.NewController)
	}
	ctors = append(ctors, newDefaultingAdmissionController, newValidationAdmissionController,
		newConfigValidationController)

	go serveReadiness(*healthAddress, options.Port)
	sharedmain.MainWithConfig(ctx, "controller", cfg, ctors...)
}
