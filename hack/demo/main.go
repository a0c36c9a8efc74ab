// Command demo shows isochron's main job on a local control plane: it starts a real
// kube-apiserver and etcd (the binaries `make envtest-bins` builds), installs the CRDs of
// isochron, KubeVirt and Multus, registers RT Node objects, runs the operator binary,
// applies config/samples, prints what the operator decided and one rendered VM, and
// shuts everything down. No kubelet or KubeVirt runs, so no VM starts a VMI.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/controllers"
	"isochron.io/isochron/test/support/testenv"
)

func main() {
	bin := flag.String("bin", "bin", "directory holding the manager binary")
	timeout := flag.Duration("timeout", 2*time.Minute, "how long to wait for the operator's decisions")
	flag.Parse()
	if err := run(*bin, *timeout); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

func run(bin string, timeout time.Duration) error {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return errors.New("KUBEBUILDER_ASSETS is not set; run `make demo`")
	}
	scheme := controllers.Scheme()

	step("Starting kube-apiserver and etcd (%s)", assets)
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{"config/crd/bases", "config/thirdparty/kubevirt", "config/thirdparty/multus"},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	defer func() {
		step("Stopping the control plane")
		_ = env.Stop()
	}()
	dir, err := os.MkdirTemp("", "isochron-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	admin, err := env.AddUser(envtest.User{Name: "demo-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return err
	}
	kcPath := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kcPath, kubeconfig, 0o600); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	ctx := context.Background()

	step("Registering RT nodes from hack/demo/nodes.yaml")
	if err := registerNodes(ctx, c, "hack/demo/nodes.yaml"); err != nil {
		return err
	}

	step("Running the operator (%s/manager); its log: %s/manager.log", bin, dir)
	logf, err := os.Create(filepath.Join(dir, "manager.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	mgr := exec.Command(filepath.Join(bin, "manager"), "--kubeconfig", kcPath, "--namespace", "default",
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0")
	mgr.Stdout, mgr.Stderr = logf, logf
	if err := mgr.Start(); err != nil {
		return fmt.Errorf("starting the manager: %w", err)
	}
	defer func() { _ = mgr.Process.Kill(); _ = mgr.Wait() }()

	step("Applying config/samples (server-side apply)")
	if err := applyDir(ctx, c, "config/samples"); err != nil {
		return err
	}

	step("Waiting for the operator to decide every CrawlerVM")
	list, err := waitForDecisions(ctx, c, timeout)
	if err != nil {
		return fmt.Errorf("%w (operator log: %s)", err, tail(filepath.Join(dir, "manager.log")))
	}

	step("What isochron decided")
	printTable(ctx, c, list)
	if kubectl := filepath.Join(assets, "kubectl"); exists(kubectl) {
		out, err := exec.Command(kubectl, "--kubeconfig", kcPath, "get", "crawlervms", "-A").CombinedOutput()
		if err != nil {
			return fmt.Errorf("kubectl get crawlervms: %w: %s", err, out)
		}
		fmt.Printf("\n$ kubectl get crawlervms -A\n%s", out)
	}

	step("The VirtualMachine created for bms/tower-a")
	vm := &unstructured.Unstructured{}
	vm.SetGroupVersionKind(kubevirtv1.GroupVersion.WithKind("VirtualMachine"))
	if err := c.Get(ctx, client.ObjectKey{Namespace: "bms", Name: "tower-a"}, vm); err != nil {
		return err
	}
	vm.SetManagedFields(nil)
	y, err := yaml.Marshal(vm.Object)
	if err != nil {
		return err
	}
	fmt.Print(string(y))
	fmt.Println("\nNo kubelet or KubeVirt runs in this demo, so no VM starts its VMI and READY is False;")
	fmt.Println("on a cluster with KubeVirt, KubeVirt starts each VM's VMI, and Ready turns True when it runs.")
	return nil
}

// applyDir applies every YAML document in dir's files (not kustomization.yaml) with
// server-side apply, as `kubectl apply --server-side` would.
func applyDir(ctx context.Context, c client.Client, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	// Namespaces first, then what crawlers refer to, then the crawlers.
	var namespaces, others, crawlers []*unstructured.Unstructured
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			switch u.GetKind() {
			case "":
			case "Namespace":
				namespaces = append(namespaces, u)
			case "CrawlerVM":
				crawlers = append(crawlers, u)
			default:
				others = append(others, u)
			}
		}
	}
	for _, u := range append(append(namespaces, others...), crawlers...) {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("demo"), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", u.GetKind(), u.GetName(), err)
		}
		fmt.Printf("  %s/%s serverside-applied\n", strings.ToLower(u.GetKind()), u.GetName())
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func registerNodes(ctx context.Context, c client.Client, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		n := &corev1.Node{}
		if err := dec.Decode(n); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		// Ready, as the kubelet reports it; RegisterNode lifts the not-ready taint as the
		// node lifecycle controller would.
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(),
		})
		if err := testenv.RegisterNode(ctx, c, n); err != nil {
			return err
		}
		fmt.Printf("  node/%s: %s CPUs, %s hugepages-2Mi allocatable\n", n.Name, n.Status.Allocatable.Cpu(), quantity(n.Status.Allocatable, "hugepages-2Mi"))
	}
}

func quantity(l corev1.ResourceList, name corev1.ResourceName) string {
	q, ok := l[name]
	if !ok {
		return "no"
	}
	return q.String()
}

// waitForDecisions waits until every CrawlerVM has a Placed condition for its current
// generation, and every placed one has its VMI.
func waitForDecisions(ctx context.Context, c client.Client, timeout time.Duration) (*isov1.CrawlerVMList, error) {
	deadline := time.Now().Add(timeout)
	for {
		list := &isov1.CrawlerVMList{}
		if err := c.List(ctx, list); err != nil {
			return nil, err
		}
		pending := 0
		for i := range list.Items {
			cvm := &list.Items[i]
			p := apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionPlaced)
			if p == nil || p.ObservedGeneration != cvm.Generation || (p.Status == "True" && cvm.Status.VMI == nil) {
				pending++
			}
		}
		if len(list.Items) > 0 && pending == 0 {
			return list, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d CrawlerVMs still undecided after %s", pending, len(list.Items), timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func printTable(ctx context.Context, c client.Client, list *isov1.CrawlerVMList) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "CRAWLERVM\tRPS\tTOLERANCE\tPLACEMENT\tNODE\tVCPUS\tHOST CPUS\tPREDICTED\tVMI\tPHASE")
	for i := range list.Items {
		cvm := &list.Items[i]
		node, predicted, vmiName, phase := "-", "-", "-", "-"
		if p := cvm.Status.Placement; p != nil {
			node = p.Node
			if p.PredictedError != nil {
				predicted = p.PredictedError.Duration.String()
			}
		}
		if v := cvm.Status.VMI; v != nil {
			vmiName = v.Name
			vmi := &kubevirtv1.VirtualMachineInstance{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: cvm.Namespace, Name: v.Name}, vmi); err == nil {
				phase = string(vmi.Status.Phase)
				if phase == "" {
					phase = "Pending (no KubeVirt)"
				}
			}
		}
		vcpus, host := "-", "-"
		if s := cvm.Status.Sizing; s != nil {
			vcpus, host = fmt.Sprint(s.VCPUs), fmt.Sprint(s.HostCPUs)
		}
		fmt.Fprintf(w, "%s/%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cvm.Namespace, cvm.Name, cvm.Spec.RPS,
			cvm.Spec.ErrorBudget.Tolerance.Duration, cvm.Spec.CPUPlacement, node, vcpus, host, predicted, vmiName, phase)
	}
	_ = w.Flush()
	for i := range list.Items {
		if p := apimeta.FindStatusCondition(list.Items[i].Status.Conditions, isov1.ConditionPlaced); p != nil {
			fmt.Printf("  %s/%s Placed=%s: %s\n", list.Items[i].Namespace, list.Items[i].Name, p.Status, p.Message)
		}
	}
	fmt.Println("  PREDICTED is the contention model's p(objective) interval error on the node, with every neighbour there.")
}

func step(format string, args ...any) {
	fmt.Printf("\n==> "+format+"\n", args...)
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
