// The sandbox process of every Pod on the testbed's real nodes: it holds the Pod's namespaces
// and does nothing else. It exits on SIGINT or SIGTERM (the runtime's stop), and as PID 1 of a
// Pod that shares its process namespace it reaps orphans.
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
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
