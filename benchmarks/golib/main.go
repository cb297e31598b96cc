// Command golib resolves workload objects through upstream ResourceInterface definitions
// with the upstream Go library (github.com/run-ai/karta), for benchmarks/golib.py.
//
// Per object it does what the library's README shows: a ComponentFactory for the object,
// the root component's status, every component's extracted instances (pod templates/specs,
// metadata, scale), and the gang size (instructions.CalculateSubtreeScale) of the root and
// of every pod-group member.
//
//	-mode naive     resource.NewComponentFactoryFromObject: the library's own jq runner,
//	                which parses and compiles every expression on every call
//	-mode compiled  the same library calls through an execution.Runner of this program
//	                that compiles each expression once and reuses the code for every object
//
// Both modes convert the object to plain JSON values once per resolve, as the library's
// runner does, so the only difference between them is the compilation.
//
// Input: -definitions DIR (ResourceInterface YAML files) and -objects FILE (a JSON array of
// objects). Output: JSON lines on stdout; with -check one line per object (what it resolved
// to, or its error), else one line with every call's time and the timed loop's CPU time
// in nanoseconds. Timing refuses an object whose resolve ends in an error unless -errors
// is given (then such calls are timed like the others, up to the error).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/itchyny/gojq"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/run-ai/karta/pkg/api/optimization/v1alpha1"
	"github.com/run-ai/karta/pkg/instructions"
	"github.com/run-ai/karta/pkg/jq/execution"
	"github.com/run-ai/karta/pkg/resource"
)

const gpuResource = corev1.ResourceName("nvidia.com/gpu")

// definition is one loaded ResourceInterface and its precomputed structure summary.
type definition struct {
	file    string
	ri      *v1alpha1.ResourceInterface
	summary *instructions.StructureSummary
}

// outcome is what one object resolved to (the -check line).
type outcome struct {
	Index      int      `json:"index"`
	Kind       string   `json:"kind"`
	Name       string   `json:"name"`
	Definition string   `json:"definition,omitempty"`
	Statuses   []string `json:"statuses"`
	Instances  int      `json:"instances"`
	Pods       int64    `json:"pods"`
	GPUs       int64    `json:"gpus"`
	GangMin    []int32  `json:"gangMin"`
	Error      string   `json:"error,omitempty"`
}

func main() {
	defs := flag.String("definitions", "", "directory of ResourceInterface YAML files")
	objs := flag.String("objects", "", "JSON array of workload objects")
	mode := flag.String("mode", "naive", "naive | compiled")
	passes := flag.Int("passes", 10, "timed passes over all objects")
	check := flag.Bool("check", false, "resolve each object once and print what it gave")
	withErrors := flag.Bool("errors", false, "time objects whose resolve ends in an error too")
	flag.Parse()
	if err := run(*defs, *objs, *mode, *passes, *check, *withErrors); err != nil {
		fmt.Fprintln(os.Stderr, "golib:", err)
		os.Exit(1)
	}
}

func run(defsDir, objectsFile, mode string, passes int, check, withErrors bool) error {
	byKind, err := loadDefinitions(defsDir)
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(objectsFile)
	if err != nil {
		return err
	}
	var objects []map[string]any
	if err := json.Unmarshal(raw, &objects); err != nil {
		return fmt.Errorf("%s: %w", objectsFile, err)
	}
	var newFactory func(*v1alpha1.ResourceInterface, map[string]any) *resource.ComponentFactory
	switch mode {
	case "naive":
		newFactory = func(ri *v1alpha1.ResourceInterface, obj map[string]any) *resource.ComponentFactory {
			return resource.NewComponentFactoryFromObject(ri, &unstructured.Unstructured{Object: obj})
		}
	case "compiled":
		cache := &codeCache{codes: map[string]*gojq.Code{}}
		newFactory = func(ri *v1alpha1.ResourceInterface, obj map[string]any) *resource.ComponentFactory {
			return resource.NewComponentFactory(ri, resource.NewAccessor(&cachedRunner{source: obj, cache: cache}))
		}
	default:
		return fmt.Errorf("unknown -mode %q", mode)
	}
	ctx := context.Background()
	resolveOne := func(i int, obj map[string]any) outcome {
		out := outcome{Index: i, Statuses: []string{}, GangMin: []int32{}}
		out.Kind, _ = obj["kind"].(string)
		if meta, ok := obj["metadata"].(map[string]any); ok {
			out.Name, _ = meta["name"].(string)
		}
		apiVersion, _ := obj["apiVersion"].(string)
		def, ok := byKind[apiVersion+" "+out.Kind]
		if !ok {
			out.Error = "no definition for " + apiVersion + " " + out.Kind
			return out
		}
		out.Definition = def.file
		if err := resolve(ctx, def, newFactory(def.ri, obj), &out); err != nil {
			out.Error = err.Error()
		}
		return out
	}
	enc := json.NewEncoder(os.Stdout)
	if check {
		for i, obj := range objects {
			if err := enc.Encode(resolveOne(i, obj)); err != nil {
				return err
			}
		}
		return nil
	}
	for i, obj := range objects { // warm-up, and every object must resolve (unless -errors)
		if out := resolveOne(i, obj); out.Error != "" && !withErrors {
			return fmt.Errorf("object %d (%s %s): %s", i, out.Kind, out.Name, out.Error)
		}
	}
	samples := make([]int64, 0, passes*len(objects))
	cpuStarted := cpuTime()
	started := time.Now()
	for range passes {
		for i, obj := range objects {
			t0 := time.Now()
			resolveOne(i, obj)
			samples = append(samples, time.Since(t0).Nanoseconds())
		}
	}
	elapsed := time.Since(started).Nanoseconds()
	cpu := cpuTime() - cpuStarted
	return enc.Encode(map[string]any{"mode": mode, "objects": len(objects), "passes": passes,
		"elapsed_ns": elapsed, "cpu_ns": cpu, "samples_ns": samples})
}

// cpuTime is the CPU time (user and system) this process has used, in nanoseconds: on a
// shared machine it counts the work, not the time spent waiting for a core.
func cpuTime() int64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return 0
	}
	return usage.Utime.Nano() + usage.Stime.Nano()
}

// resolve reads status, every component's instances and the gang sizes of one object.
func resolve(ctx context.Context, def *definition, factory *resource.ComponentFactory, out *outcome) error {
	root, err := factory.GetRootComponent()
	if err != nil {
		return err
	}
	status, err := root.GetStatus(ctx)
	if err != nil {
		return err
	}
	if status != nil {
		for _, s := range status.MatchedStatuses {
			out.Statuses = append(out.Statuses, string(s))
		}
	}
	children, err := factory.GetChildComponents()
	if err != nil {
		return err
	}
	for _, component := range append([]*resource.Component{root}, children...) {
		instances, err := component.GetExtractedInstances(ctx)
		if err != nil {
			return fmt.Errorf("component %s: %w", component.Name(), err)
		}
		if !component.HasPodDefinition() {
			continue
		}
		for _, instance := range instances {
			out.Instances++
			replicas := int64(1)
			if instance.Scale != nil && instance.Scale.Replicas != nil {
				replicas = int64(*instance.Scale.Replicas)
			}
			out.Pods += replicas
			out.GPUs += replicas * instanceGPUs(instance)
		}
	}
	gangRoots := []string{root.Name()}
	if gang := def.ri.Spec.Instructions.GangScheduling; gang != nil {
		for _, group := range gang.PodGroups {
			for _, member := range group.Members {
				gangRoots = append(gangRoots, member.ComponentName)
			}
		}
	}
	for _, name := range gangRoots {
		size, err := instructions.CalculateSubtreeScale(ctx, name, nil, factory, def.summary)
		if err != nil {
			return fmt.Errorf("gang size of %s: %w", name, err)
		}
		out.GangMin = append(out.GangMin, size)
	}
	return nil
}

// instanceGPUs is the nvidia.com/gpu limit (else request) summed over one pod's containers.
func instanceGPUs(instance resource.ExtractedInstance) int64 {
	var containers []corev1.Container
	switch {
	case instance.PodTemplateSpec != nil:
		containers = instance.PodTemplateSpec.Spec.Containers
	case instance.PodSpec != nil:
		containers = instance.PodSpec.Containers
	case instance.FragmentedPodSpec != nil:
		fragment := instance.FragmentedPodSpec
		containers = fragment.Containers
		if fragment.Container != nil {
			containers = append(containers, *fragment.Container)
		}
		if fragment.Resources != nil {
			containers = append(containers, corev1.Container{Resources: *fragment.Resources})
		}
	}
	var total int64
	for _, c := range containers {
		if q, ok := c.Resources.Limits[gpuResource]; ok {
			total += q.Value()
		} else if q, ok := c.Resources.Requests[gpuResource]; ok {
			total += q.Value()
		}
	}
	return total
}

// loadDefinitions reads every *.yaml file of dir as one ResourceInterface, keyed by the
// "apiVersion kind" of its root component.
func loadDefinitions(dir string) (map[string]*definition, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	byKind := map[string]*definition{}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		ri := &v1alpha1.ResourceInterface{}
		if err := yaml.Unmarshal(raw, ri); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		summary, err := instructions.NewStructureSummary(ri)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		kind := ri.Spec.StructureDefinition.RootComponent.Kind
		if kind == nil {
			return nil, fmt.Errorf("%s: root component has no kind", file)
		}
		apiVersion := kind.Version
		if kind.Group != "" {
			apiVersion = kind.Group + "/" + kind.Version
		}
		byKind[apiVersion+" "+kind.Kind] = &definition{file: filepath.Base(file), ri: ri, summary: summary}
	}
	return byKind, nil
}

// codeCache holds compiled jq code by expression, shared by every object of a run.
type codeCache struct {
	mu    sync.Mutex
	codes map[string]*gojq.Code
}

func (c *codeCache) get(expression string) (*gojq.Code, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if code, ok := c.codes[expression]; ok {
		return code, nil
	}
	query, err := gojq.Parse(expression)
	if err != nil {
		return nil, err
	}
	code, err := gojq.Compile(query)
	if err != nil {
		return nil, err
	}
	c.codes[expression] = code
	return code, nil
}

// cachedRunner is a read-only execution.Runner over one object with the library's default
// limits (1000 results, 10 s per query); it compiles through the shared codeCache.
type cachedRunner struct {
	source    any
	cache     *codeCache
	converted any
}

var _ execution.Runner = (*cachedRunner)(nil)

const (
	maxResults   = 1000
	queryTimeout = 10 * time.Second
)

func (r *cachedRunner) GetObject() (any, error) {
	if r.converted == nil {
		raw, err := json.Marshal(r.source)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(raw, &r.converted); err != nil {
			return nil, err
		}
	}
	return r.converted, nil
}

func (r *cachedRunner) Evaluate(ctx context.Context, expression string) ([]any, error) {
	input, err := r.GetObject()
	if err != nil {
		return nil, err
	}
	code, err := r.cache.get(expression)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", expression, err)
	}
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	var results []any
	iter := code.RunWithContext(ctx, input)
	for {
		v, ok := iter.Next()
		if !ok {
			return results, nil
		}
		if err, ok := v.(error); ok {
			return nil, fmt.Errorf("%s: %w", expression, err)
		}
		results = append(results, v)
		if len(results) >= maxResults {
			return nil, fmt.Errorf("%s: more than %d results", expression, maxResults)
		}
	}
}

var errReadOnly = errors.New("this benchmark's runner does not write")

func (r *cachedRunner) Assign(context.Context, string, any) error { return errReadOnly }

func (r *cachedRunner) AssignZip(context.Context, string, []any) error { return errReadOnly }
