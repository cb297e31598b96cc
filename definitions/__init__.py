"""The built-in workload definition catalog (YAML files beside this one), shipped as dispatcher.catalog."""
