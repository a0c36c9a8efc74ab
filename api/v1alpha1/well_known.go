package v1alpha1

// Labels and annotations isochron puts on the objects it creates (VMs and their VMIs,
// probe Jobs and their pods, probe Services). Use these constants; never spell them out.
const (
	// LabelCrawlerVM names the CrawlerVM an object belongs to (in its namespace).
	LabelCrawlerVM = "isochron.io/crawlervm"
	// LabelManagedBy is Kubernetes' recommended label for the tool that manages an
	// object; isochron sets it to ManagedBy.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedBy is isochron's value of LabelManagedBy.
	ManagedBy = "isochron"
	// LabelComponent is Kubernetes' recommended label for an object's role; isochron sets
	// it to ComponentProbe on probe Jobs, their pods and the probe Service.
	LabelComponent = "app.kubernetes.io/component"
	// ComponentProbe is the LabelComponent of a crawler's probe objects.
	ComponentProbe = "probe"
	// LabelName is Kubernetes' recommended label for an application's name; probe pods
	// carry ProbeName.
	LabelName = "app.kubernetes.io/name"
	// ProbeName is the LabelName of probe Jobs and their pods: the program they run.
	ProbeName = "rtprobe"

	// AnnotationVMInputs, on a VM's template and so on each VMI KubeVirt starts from it,
	// is the hash of what the template was rendered from (the crawler's spec fields it
	// depends on, its size and RT binding; not its node, which a live migration changes):
	// a running VMI whose inputs changed is restarted once, when KubeVirt cannot apply the
	// change live; one that only an older release of isochron rendered differently keeps
	// running.
	AnnotationVMInputs = "isochron.io/vm-inputs"
	// AnnotationVMIInputs is the hash (node included) with which releases of isochron
	// before it owned VMs annotated the bare VMIs they created; read when a crawler's VM
	// adopts such a VMI.
	AnnotationVMIInputs = "isochron.io/vmi-inputs"
	// AnnotationProbeTrigger, AnnotationProbeGeneration, AnnotationProbeVMIUID and
	// AnnotationProbeNode record on a probe Job why it runs (ProbeTrigger), which spec
	// generation, which VMI and on which node it measures.
	AnnotationProbeTrigger    = "isochron.io/probe-trigger"
	AnnotationProbeGeneration = "isochron.io/probe-generation"
	AnnotationProbeVMIUID     = "isochron.io/probe-vmi-uid"
	AnnotationProbeNode       = "isochron.io/probe-node"
)

// AnnotationMultusResourceName is Multus's annotation on a NetworkAttachmentDefinition
// naming the device resource (an SR-IOV VF pool) a pod on that network needs. The
// NetworkAttachmentDefinition client, which defines Multus's other annotations, has no
// constant for it.
const AnnotationMultusResourceName = "k8s.v1.cni.cncf.io/resourceName"

// AnnotationRTUplink on a NetworkAttachmentDefinition names the host interface its RT
// traffic leaves the node by (the same name on every node), for isochron's NIC agent.
// Without it the agent takes the physical port of the network's bridge (bridge CNI's
// "bridge", cni0 by default).
const AnnotationRTUplink = "isochron.io/rt-uplink"

// AnnotationGuestDSCP on a NetworkAttachmentDefinition, "true", opts its crawlers in to
// marking their RT-NIC's traffic with its class's DSCP from inside the guest (the probe
// agent does it), for networks whose traffic the host cannot classify, such as SR-IOV
// VFs, which bypass the host's qdiscs. Elsewhere the NIC agent marks it on the host,
// where the guest cannot undo it.
const AnnotationGuestDSCP = "isochron.io/guest-dscp"

// LeaderLease is the name of the manager's leader election Lease (in the manager's
// namespace). Its holder is the one replica that decides reservations; the API server's
// leader fence (config/admission/leader_fence.yaml) admits a change of a crawler's
// reservation only from the identity the Lease names (status.decidedBy).
const LeaderLease = "isochron.isochron.io"

// NICAgent is the name of isochron's NIC agent: its field owner (of status.rtNIC), its
// Events' source and its DaemonSet's name.
const NICAgent = "isochron-nic-agent"
