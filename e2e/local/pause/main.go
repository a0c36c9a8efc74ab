// Command pause is the pod sandbox ("infra") container of the local e2e cluster: it
// holds the pod's namespaces and does nothing else, like Kubernetes' pause image, but
// built from this repository so no image has to be pulled. Static
// (CGO_ENABLED=0), it runs in an image FROM scratch.
//
// As PID 1 of the pod's PID namespace it reaps orphaned children and exits on
// SIGINT or SIGTERM.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-v" || os.Args[1] == "--version") {
		fmt.Println("isochron e2e pause")
		return
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
