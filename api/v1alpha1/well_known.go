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
	// AnnotationUserDataHash, on a VM's template and so on each VMI KubeVirt starts from
	// it, is the hash of spec.guest.cloudInitUserData it was rendered with. The user data
	// reaches the guest from the crawler's guest Secret, which KubeVirt reads only when it
	// starts a VMI: a running VMI whose hash differs from its template's is restarted once.
	AnnotationUserDataHash = "isochron.io/user-data-hash"
	// AnnotationVMIInputs is the hash (node included) with which releases of isochron
	// before it owned VMs annotated the bare VMIs they created; read when a crawler's VM
	// adopts such a VMI.
	AnnotationVMIInputs = "isochron.io/vmi-inputs"
	// AnnotationProbeTrigger, AnnotationProbeGeneration, AnnotationProbeVMIUID,
	// AnnotationProbeNode, AnnotationProbeMigration and AnnotationProbeSlot record on a
	// probe Job why it runs (ProbeTrigger), which spec generation, which VMI, on which
	// node and after which live migration it measures, and which schedule slot it fills
	// (RFC 3339).
	AnnotationProbeTrigger    = "isochron.io/probe-trigger"
	AnnotationProbeGeneration = "isochron.io/probe-generation"
	AnnotationProbeVMIUID     = "isochron.io/probe-vmi-uid"
	AnnotationProbeNode       = "isochron.io/probe-node"
	AnnotationProbeMigration  = "isochron.io/probe-migration"
	AnnotationProbeSlot       = "isochron.io/probe-slot"
)

// AnnotationProbeRequested on a CrawlerVM asks for a probe now (kubectl isochron probe): its
// value is when it was asked, in RFC 3339 (whole seconds count). A probe with trigger
// Requested starts once the crawler's VMI runs, when no probe started at or after that
// time; a time still in the future waits until it is reached.
const AnnotationProbeRequested = "isochron.io/probe-requested"

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

// NodeAccessConfigMap is the ConfigMap, in the manager's namespace, in which the cluster
// administrator says which nodes each namespace's crawlers may reach: the taints they may
// tolerate and the labels their nodes must carry (internal/access). The admission policy
// isochron-node-access and the manager read it.
const NodeAccessConfigMap = "isochron-node-access"

// NetworksConfigMap is the ConfigMap, in the manager's namespace, in which the cluster
// administrator names the RT networks' shared namespaces (NetworksSharedNamespaces) and
// the host interfaces the NIC agents may program (NetworksRTUplinks). The manager, the
// admission policy isochron-rt-network-tenancy and the NIC agents read it; the agents,
// in their own namespace, through the API server at their start.
const (
	NetworksConfigMap        = "isochron-networks"
	NetworksSharedNamespaces = "sharedNamespaces"
	NetworksRTUplinks        = "rtUplinks"
)

// The environment variables config/manager fills from NetworksConfigMap's keys, which
// the manager's --shared-network-namespaces and --rt-uplinks (and the NIC agent's
// --rt-uplinks) default to. The ConfigMap ships without keys, so that re-applying a
// release never owns, and so never resets, the administrator's: a variable whose key is
// missing is unset (an optional configMapKeyRef), which is why the flags read them as
// defaults rather than as $(VAR) in the arguments (Kubernetes leaves an unset one there
// literally).
const (
	EnvSharedNetworkNamespaces = "SHARED_NETWORK_NAMESPACES"
	EnvRTUplinks               = "RT_UPLINKS"
)

// NICAgent is the name of isochron's NIC agent: its field owner (of status.rtNIC), its
// Events' source and its DaemonSet's name.
const NICAgent = "isochron-nic-agent"

// The CrawlerVM fields an API client may select on (the CRD's selectableFields): each
// node's NIC agent lists and watches only the crawlers placed on its node and those
// moving from it.
const (
	FieldPlacementNode = "status.placement.node"
	FieldMoveFrom      = "status.move.from"
)

// AnnotationFencedNode on a CrawlerVM names a deleted node whose machine is off, so that
// the crawler, presumed down there, starts elsewhere (docs/availability.md). Deleting a
// Node does not stop its machine: only this, or the node.kubernetes.io/out-of-service
// taint on a Node that still exists, says the crawler's first copy cannot run any more.
const AnnotationFencedNode = "isochron.io/fenced-node"

// PriorityClassRealtime is the PriorityClass of every crawler's virt-launcher pod (the
// VMI's spec.priorityClassName), installed with isochron (config/scheduling): above
// every ordinary pod, so that none preempts a launcher on the node isochron reserved for
// it, and never preempting itself. An admission policy lets only KubeVirt create pods
// of this class.
const PriorityClassRealtime = "isochron-realtime"
