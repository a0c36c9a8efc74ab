package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"isochron.io/isochron/test/support/testenv"
)

// The other pods of a cluster isochron shares (-other-pods), as a real cluster has them:
// most of them on ordinary nodes (no KubeVirt there: no crawler can use them) or
// finished, a few on the RT nodes (DaemonSets and the like, which hold part of those
// nodes). They are created before the manager starts, and bound directly (no scheduler);
// a bound pod that has not started holds its node as a running one does.
const (
	// othersOnRT is the share of the other pods bound to the RT nodes, running.
	othersOnRT = 0.10
	// othersFinished is the share finished (Succeeded, one in ten Failed), on any node.
	othersFinished = 0.40
)

// othersNamespace holds the other pods.
const othersNamespace = "others"

// plainNode is an ordinary node: no KubeVirt, no CPU Manager, no realtime.
func plainNode(name string, cpus int64) *corev1.Node {
	n := testenv.RTNode(name, cpus)
	for _, l := range []string{kubevirtv1.NodeSchedulable, kubevirtv1.CPUManager, kubevirtv1.RealtimeLabel} {
		delete(n.Labels, l)
	}
	return n
}

// otherPod is the i-th other pod, on node; finished pods end Succeeded (Failed one in
// ten). Each requests 100m CPU and 128Mi, as a typical small workload.
func otherPod(i int, node string) *corev1.Pod {
	rl := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: othersNamespace, Name: fmt.Sprintf("other-%06d", i),
			Labels: map[string]string{"app": fmt.Sprintf("app-%03d", i%500)}},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.invalid/app:1.0",
				Resources: corev1.ResourceRequirements{Requests: rl},
			}},
		},
	}
}

// others is what createOthers made.
type others struct {
	onRT, onPlain, finished int
	took                    time.Duration
}

// createOthers creates n other pods spread over the RT nodes rt and the ordinary nodes
// plain (othersOnRT, othersFinished), with 32 requests at a time in protobuf, and says
// how long it took.
func createOthers(ctx context.Context, env *testenv.Env, n int, rt, plain []*corev1.Node) (others, error) {
	var o others
	if n == 0 {
		return o, nil
	}
	if len(plain) == 0 {
		return o, fmt.Errorf("-other-pods needs -other-nodes: the other pods live mostly on ordinary nodes")
	}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: othersNamespace}}); err != nil {
		return o, err
	}
	if err := waitDefaultServiceAccount(ctx, env, othersNamespace); err != nil {
		return o, err
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.QPS, cfg.Burst = 5000, 5000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return o, err
	}
	nRT, nFinished := int(float64(n)*othersOnRT), int(float64(n)*othersFinished)
	o = others{onRT: nRT, finished: nFinished, onPlain: n - nRT - nFinished}
	all := append(append([]*corev1.Node{}, rt...), plain...)
	start := time.Now()
	var done atomic.Int64
	stopProgress := progress(func() string { return fmt.Sprintf("%d of %d other pods created", done.Load(), n) })
	defer stopProgress()
	err = parallel(32, n, func(i int) error {
		var node string
		switch {
		case i < nRT:
			node = rt[i%len(rt)].Name
		case i < nRT+nFinished:
			node = all[i%len(all)].Name
		default:
			node = plain[i%len(plain)].Name
		}
		p, err := cs.CoreV1().Pods(othersNamespace).Create(ctx, otherPod(i, node), metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating other pod %d: %w", i, err)
		}
		if i >= nRT && i < nRT+nFinished {
			p.Status.Phase = corev1.PodSucceeded
			if i%10 == 0 {
				p.Status.Phase = corev1.PodFailed
			}
			if _, err := cs.CoreV1().Pods(othersNamespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("finishing other pod %d: %w", i, err)
			}
		}
		done.Add(1)
		return nil
	})
	o.took = time.Since(start)
	return o, err
}

// progress prints what says every 15 s until stopped: long phases show they move.
func progress(what func() string) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(15 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Println("  ...", what())
			}
		}
	}()
	return func() { close(done) }
}

// memory is a process's resident set now (VmRSS) and its high-water mark (VmHWM).
type memory struct{ rss, hwm int64 }

// memoryOf reads a process's VmRSS and VmHWM from /proc/<pid>/status.
func memoryOf(pid int) (memory, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memory{}, err
	}
	var m memory
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			m.rss = kb << 10
		case "VmHWM:":
			m.hwm = kb << 10
		}
	}
	if m.hwm == 0 {
		return m, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
	}
	return m, nil
}
