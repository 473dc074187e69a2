//go:build tools

// Package tools pins the node's Kubernetes commands: the kubelet and kube-proxy. A module of their
// own, so adding them changed none of the control plane's pins (its cached builds stay valid).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
