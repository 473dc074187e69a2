// Pins of the upstream operator modules whose CRDs the tests validate manifests against, and of
// Kubernetes itself for the schemas of built-in kinds.
// Only downloaded (`go mod download`), never built: tests/crds.py reads the CRD files from the
// module cache, checked against go.sum.
module kubetrain.local/crds

go 1.26

require (
	github.com/kubeflow/mpi-operator v0.8.0
	github.com/kubeflow/trainer/v2 v2.3.0
	github.com/kubeflow/training-operator v1.9.3
	k8s.io/kubernetes v1.36.3 // the built-in kinds' OpenAPI documents (api/openapi-spec), e.g. NetworkPolicy
	sigs.k8s.io/jobset v0.12.0
)
