// Package slo is the operator's side of a crawler's SLO: it decides when the SLO is
// measured, builds the probe Job and the gateway Service, and judges what a probe
// reports against the error budget. It does no I/O. (rtprobe, which the probe Job runs,
// measures; its libraries are in probes/.)
//
// A probe Job runs `rtprobe slo` for spec.probe.duration:
//   - a gateway at the stable Service <name>-probe:8080, which stamps the arrival of
//     each request the crawler in the guest sends to it (`?point=ID`, each point once per
//     second) and measures each point's interval error, as the BMS gateway did in the
//     crawler study; and
//   - with spec.rtNIC, UDP round trips at the crawler's request rate to the echo service
//     (port 7) on the VM's RT-NIC address, each held to the RT-NIC deadline, as in the
//     RTvNIC study.
//
// Both are black-box measures taken outside the VM: they see what the building's
// gateway would see, whatever inside or around the VM caused it (vCPU waits, the
// host's I/O path, the NIC, the crawler's own code). See docs/probes.md.
package slo

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/render"
	"isochron.io/isochron/probes/gateway"
)

// The crawler's side of the contract (docs/probes.md).
const (
	// GatewayPort is the port of the probe's gateway and of its Service.
	GatewayPort = 8080
	// EchoPort is the UDP echo service (RFC 862) the guest runs on its RT-NIC.
	EchoPort = 7
	// Period is each point's request period: every point is requested once a second.
	Period = time.Second
	// WANDelay is the gateway's emulated one-way WAN delay before each answer.
	WANDelay = 10 * time.Millisecond
)

// DefaultImage is the rtprobe image of this release (`make docker-build` builds it).
const DefaultImage = "isochron/rtprobe:v0.1.0"

// Options are the operator-wide probe settings.
type Options struct {
	// Image is the rtprobe image.
	Image string
	// Grace is the time a probe Job gets beyond spec.probe.duration to be scheduled,
	// pull its image and report, before its active deadline fails it.
	Grace time.Duration
	// TTL is how long a finished probe Job (and its pod, with its logs) is kept.
	TTL time.Duration
	// CPU is the probe pod's CPU request and limit; zero means DefaultCPU. A whole number
	// gives the Guaranteed pod exclusive CPUs under the static CPU Manager; a fraction
	// keeps it Guaranteed on the shared pool (for nodes too small to spare a CPU).
	CPU resource.Quantity
	// NameKey names the probe Jobs (JobName): credential.NameKey of the manager's master
	// key, which the reconciler sets.
	NameKey []byte
	// PullSecret is the Secret, in each crawler's namespace, that its probe pods and its
	// VM's agent disk pull Image with (a private registry); "" for none.
	PullSecret string
}

// DefaultCPU is the probe pod's CPU unless Options.CPU says otherwise: one exclusive CPU,
// so that the probe's own timing is not what it measures.
var DefaultCPU = resource.MustParse("1")

// DefaultOptions are the settings of a production manager.
func DefaultOptions(image string) Options {
	return Options{Image: image, Grace: 5 * time.Minute, TTL: time.Hour}
}

// pullSecrets are the probe pods' imagePullSecrets: PullSecret's, or none.
func (o Options) pullSecrets() []corev1.LocalObjectReference {
	if o.PullSecret == "" {
		return nil
	}
	return []corev1.LocalObjectReference{{Name: o.PullSecret}}
}

func (o Options) cpu() resource.Quantity {
	if o.CPU.IsZero() {
		return DefaultCPU.DeepCopy()
	}
	return o.CPU.DeepCopy()
}

// Run identifies one probe run: why, of which spec generation and which VMI, and for a
// scheduled run the schedule slot. Its fields make the Job's name.
type Run struct {
	Trigger    isov1.ProbeTrigger
	Generation int64
	VMIUID     string
	// Node is the node the VMI runs on (a live migration moves the same VMI).
	Node string
	// Migration is the UID of the live migration that brought the VMI to Node, "" when it
	// started there: with Node, what makes each placement's run its own (a VMI that
	// moves back to a node it left is measured there again).
	Migration string
	// Slot is the schedule time a scheduled run fills, or the time a requested run was
	// asked for (AnnotationProbeRequested); zero otherwise.
	Slot time.Time
}

// ServiceName is the stable name of a crawler's probe gateway Service. The CRD limits
// CrawlerVM names to 57 characters so that it is a valid DNS label.
func ServiceName(cvm *isov1.CrawlerVM) string { return cvm.Name + "-probe" }

// Traffic is the window's traffic for spec.probe.traffic: the gateway's "agent" (the
// default) or "crawler".
func Traffic(cvm *isov1.CrawlerVM) string {
	if cvm.Spec.Probe != nil && cvm.Spec.Probe.Traffic == isov1.ProbeTrafficCrawler {
		return gateway.TrafficCrawler
	}
	return gateway.TrafficAgent
}

// GatewayURLs are the probe gateway's base URLs the guest's agent tries, in order: the
// Service's DNS name, where the guest resolves cluster names, and its cluster IP, where
// it does not (a guest with a static address and no cluster DNS) or while the name is not
// resolvable yet.
func GatewayURLs(cvm *isov1.CrawlerVM, clusterIP string) []string {
	urls := []string{fmt.Sprintf("http://%s.%s.svc:%d", ServiceName(cvm), cvm.Namespace, GatewayPort)}
	if clusterIP != "" && clusterIP != corev1.ClusterIPNone {
		urls = append(urls, "http://"+net.JoinHostPort(clusterIP, strconv.Itoa(GatewayPort)))
	}
	return urls
}

// JobName is the name of the Job of run: the crawler's name (cut to 40 characters) and
// 48 bits of an HMAC, keyed with key (Options.NameKey), of the crawler's UID and every
// field of the run, at most 59 characters. The same run always gets the same name, so a
// run is never created twice; each placement of a VMI (its node and the migration that
// took it there) gets its own. No one without the manager's key can name a run's Job
// before isochron creates it, so no one can hold its name.
func JobName(key []byte, cvm *isov1.CrawlerVM, run Run) string {
	h := hmac.New(sha256.New, key)
	fmt.Fprintf(h, "%s/%s/%d/%s/%s/%s/%d", cvm.UID, run.Trigger, run.Generation, run.VMIUID, run.Node, run.Migration, run.Slot.Unix())
	base := cvm.Name
	if len(base) > 40 {
		base = base[:40]
	}
	return base + "-probe-" + hex.EncodeToString(h.Sum(nil)[:6])
}

// ProbeKeyEnv is the probe container's environment variable that holds the crawler's
// probe key, from the guest Secret (rtprobe slo --key-env).
const ProbeKeyEnv = "ISOCHRON_PROBE_KEY"

// Selector is the labels of a crawler's probe Jobs and their pods.
func Selector(cvm *isov1.CrawlerVM) map[string]string {
	return map[string]string{isov1.LabelCrawlerVM: cvm.Name, isov1.LabelComponent: isov1.ComponentProbe}
}

// ServiceSelector is what the crawler's probe Service selects: its probe pods and, while
// a probe runs (status.activeProbe), only the pods of that Job (the Job controller's
// controller-uid label), so that no other pod with the probe's labels receives the
// agent's traffic.
func ServiceSelector(cvm *isov1.CrawlerVM) map[string]string {
	sel := Selector(cvm)
	if a := cvm.Status.ActiveProbe; a != nil {
		sel[batchv1.ControllerUidLabel] = a.UID
	}
	return sel
}

// Service is the crawler's probe gateway Service: stable, so the guest's crawler can be
// pointed at http://<name>-probe.<namespace>.svc:8080/ once; it has endpoints only while
// a probe runs, and only its probe's pod.
func Service(cvm *isov1.CrawlerVM) *corev1.Service {
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            ServiceName(cvm),
			Namespace:       cvm.Namespace,
			Labels:          Selector(cvm),
			OwnerReferences: []metav1.OwnerReference{render.OwnerReference(cvm)},
		},
		Spec: corev1.ServiceSpec{
			Selector: ServiceSelector(cvm),
			Ports: []corev1.ServicePort{{
				Name: "gateway", Protocol: corev1.ProtocolTCP,
				Port: GatewayPort, TargetPort: intstr.FromString("gateway"),
			}},
		},
	}
}

// Target is where the round trips go: the RT-NIC's address, if the crawler has one.
type Target struct {
	// Network is the RT-NIC's NetworkAttachmentDefinition, which the probe pod joins.
	Network *NetworkRef
	// IP is the VM's address on it, as the VMI reports it; empty if not (yet) known, in
	// which case the probe measures the gateway only and says the RT-NIC was not measured.
	IP string
}

// NetworkRef is a NetworkAttachmentDefinition and the device resource it needs.
type NetworkRef struct {
	Namespace, Name string
	// ResourceName is its k8s.v1.cni.cncf.io/resourceName annotation (SR-IOV), if any.
	ResourceName string
}

// NetworkRefOf reads the reference from a NetworkAttachmentDefinition's key and annotations.
func NetworkRefOf(namespace, name string, annotations map[string]string) *NetworkRef {
	return &NetworkRef{Namespace: namespace, Name: name, ResourceName: annotations[isov1.AnnotationMultusResourceName]}
}

// Job is the probe Job of run. It is owned by the crawler, runs one Guaranteed pod with
// a whole CPU (so the probe is not its own noise), is never retried (a retry would be a
// different measurement; the next trigger probes again), fails at its active deadline
// (duration + grace) and is deleted TTL after it finishes. Its gateway counts only the
// requests with the crawler's probe credential: the pod has the crawler's key from the
// guest Secret (render.GuestSecret).
func Job(cvm *isov1.CrawlerVM, run Run, target Target, opts Options) *batchv1.Job {
	duration := ProbeDuration(cvm)
	args := []string{
		"slo",
		"--listen=:" + strconv.Itoa(GatewayPort),
		"--period=" + Period.String(),
		"--delay=" + WANDelay.String(),
		"--objective=" + string(cvm.Spec.ErrorBudget.Objective),
		"--tolerance=" + cvm.Spec.ErrorBudget.Tolerance.Duration.String(),
		"--duration=" + duration.String(),
		"--report=/dev/termination-log",
		// The window the agent in the guest finds at /window: the crawler's schedule.
		"--crawl-rps=" + strconv.Itoa(int(cvm.Spec.RPS)),
		"--traffic=" + Traffic(cvm),
		"--key-env=" + ProbeKeyEnv,
	}
	podAnnotations := map[string]string{}
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    opts.cpu(),
		corev1.ResourceMemory: resource.MustParse("64Mi"),
	}
	if cvm.Spec.RTNIC != nil && target.Network != nil {
		podAnnotations[nadv1.NetworkAttachmentAnnot] = target.Network.Namespace + "/" + target.Network.Name
		if target.Network.ResourceName != "" {
			resources[corev1.ResourceName(target.Network.ResourceName)] = resource.MustParse("1")
		}
		if target.IP != "" {
			args = append(args,
				"--rtt-target="+net.JoinHostPort(target.IP, strconv.Itoa(EchoPort)),
				"--rtt-rate="+strconv.Itoa(int(cvm.Spec.RPS)),
				"--rtt-deadline="+cvm.Spec.RTNIC.Deadline.Duration.String())
		}
	}
	labels := Selector(cvm)
	labels[isov1.LabelName] = isov1.ProbeName
	labels[isov1.LabelManagedBy] = isov1.ManagedBy
	annotations := map[string]string{
		isov1.AnnotationProbeTrigger:    string(run.Trigger),
		isov1.AnnotationProbeGeneration: strconv.FormatInt(run.Generation, 10),
		isov1.AnnotationProbeVMIUID:     run.VMIUID,
		isov1.AnnotationProbeNode:       run.Node,
	}
	if run.Migration != "" {
		annotations[isov1.AnnotationProbeMigration] = run.Migration
	}
	if !run.Slot.IsZero() {
		annotations[isov1.AnnotationProbeSlot] = run.Slot.UTC().Format(time.RFC3339)
	}
	node := ""
	if cvm.Status.Placement != nil {
		node = cvm.Status.Placement.Node
	}
	return &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            JobName(opts.NameKey, cvm, run),
			Namespace:       cvm.Namespace,
			Labels:          labels,
			Annotations:     annotations,
			OwnerReferences: []metav1.OwnerReference{render.OwnerReference(cvm)},
		},
		Spec: batchv1.JobSpec{
			Parallelism:             ptr.To[int32](1),
			Completions:             ptr.To[int32](1),
			BackoffLimit:            ptr.To[int32](0),
			ActiveDeadlineSeconds:   ptr.To(int64((duration + opts.Grace).Seconds())),
			TTLSecondsAfterFinished: ptr.To(int32(opts.TTL.Seconds())),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: nilIfEmpty(podAnnotations)},
				Spec: corev1.PodSpec{
					RestartPolicy:                 corev1.RestartPolicyNever,
					AutomountServiceAccountToken:  ptr.To(false),
					EnableServiceLinks:            ptr.To(false),
					TerminationGracePeriodSeconds: ptr.To[int64](10),
					Affinity:                      awayFrom(node),
					ImagePullSecrets:              opts.pullSecrets(),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						RunAsUser:      ptr.To[int64](65532),
						RunAsGroup:     ptr.To[int64](65532),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:  "rtprobe",
						Image: opts.Image,
						Args:  args,
						Ports: []corev1.ContainerPort{{Name: "gateway", ContainerPort: GatewayPort, Protocol: corev1.ProtocolTCP}},
						Env: []corev1.EnvVar{{Name: ProbeKeyEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
							LocalObjectReference: corev1.LocalObjectReference{Name: render.GuestSecretName(cvm)}, Key: render.SecretKeyProbeKey,
						}}}},
						// Requests = limits, whole CPU: Guaranteed QoS, an exclusive CPU
						// under the static CPU Manager.
						Resources: corev1.ResourceRequirements{Requests: resources, Limits: resources.DeepCopy()},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/metrics", Port: intstr.FromString("gateway")}},
							PeriodSeconds: 5,
						},
						TerminationMessagePath:   corev1.TerminationMessagePathDefault,
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
				},
			},
		},
	}
}

// ProbeDuration is spec.probe.duration, 20m when unset (the schema's default).
func ProbeDuration(cvm *isov1.CrawlerVM) time.Duration {
	if cvm.Spec.Probe != nil && cvm.Spec.Probe.Duration != nil {
		return cvm.Spec.Probe.Duration.Duration
	}
	return 20 * time.Minute
}

// awayFrom prefers any node but the crawler's own: the probe should measure the crawler
// from outside, not be one more neighbour competing with it.
func awayFrom(node string) *corev1.Affinity {
	if node == "" {
		return nil
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
			Weight: 100,
			Preference: corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{
				Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{node},
			}}},
		}},
	}}
}

func nilIfEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}
