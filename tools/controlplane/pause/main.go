// Command pause is the pod sandbox's process: it holds the pod's namespaces open and reaps
// orphaned children until it is told to stop. registry.k8s.io/pause cannot be pulled here, so the
// node's containerd runs this one, wrapped into a local image by tools/cluster.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			return
		}
		// PID 1 of the pod: reap every exited child, or they stay zombies.
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
