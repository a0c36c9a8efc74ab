// Package admission runs KubeVirt's own create-time admission logic for
// VirtualMachines and VirtualMachineInstances in-process, without an API server or
// virt-api.
//
// It lets tests check that the VMs the operator renders, and the VMIs KubeVirt starts
// from them, would be accepted by a real KubeVirt (same version as test/kubevirt/go.mod)
// before ever talking to a cluster.
package admission

import (
	"context"
	"encoding/json"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8sfield "k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/cache"

	kubevirtv1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/defaults"
	netadmitter "kubevirt.io/kubevirt/pkg/network/admitter"
	"kubevirt.io/kubevirt/pkg/virt-api/webhooks"
	"kubevirt.io/kubevirt/pkg/virt-api/webhooks/mutating-webhook/mutators"
	"kubevirt.io/kubevirt/pkg/virt-api/webhooks/validating-webhook/admitters"
	virtconfig "kubevirt.io/kubevirt/pkg/virt-config"
	"kubevirt.io/kubevirt/pkg/virt-config/featuregate"
)

// Architecture is the node architecture the simulated cluster reports
// (KubeVirt CR status.defaultArchitecture). Fixed rather than runtime.GOARCH
// so results do not depend on the machine running the tests.
const Architecture = "amd64"

// Validate runs what virt-api does on VMI CREATE:
//
//  1. the mutating webhook's defaulting (mutators.ApplyNewVMIMutations), since
//     the validating webhook only ever sees mutated objects (e.g. it rejects
//     an empty spec.architecture, which the mutator fills in);
//  2. the validating webhook (admitters.VMICreateAdmitter.Admit): OpenAPI
//     schema check, feature-gate checks, ValidateVirtualMachineInstanceSpec,
//     volume/disk mapping, mandatory fields, metadata, Hyper-V and per-arch
//     checks, plus the network spec validator virt-api registers.
//
// featureGates are what a cluster admin would list in the KubeVirt CR under
// spec.configuration.developerConfiguration.featureGates; GA gates are always
// on regardless. The request is made as an ordinary user, not a KubeVirt
// service account. VMIPresets are not applied (no API server to list them).
//
// A nil/empty result means KubeVirt would admit the VMI. Note KubeVirt caps
// the causes it reports at 10. Failures of the harness itself (e.g. the VMI
// cannot be marshalled) are also reported as causes, so callers only have one
// thing to check.
func Validate(vmi *kubevirtv1.VirtualMachineInstance, featureGates []string) []metav1.StatusCause {
	cfg, err := newClusterConfig(featureGates)
	if err != nil {
		return harnessError(err)
	}

	// Work on a copy: mutation must not leak into the caller's object.
	vmi = vmi.DeepCopy()
	if err := mutators.ApplyNewVMIMutations(vmi, cfg); err != nil {
		return harnessError(fmt.Errorf("mutating webhook defaults: %w", err))
	}

	raw, err := json.Marshal(vmi)
	if err != nil {
		return harnessError(err)
	}
	ar := &admissionv1.AdmissionReview{
		Request: &admissionv1.AdmissionRequest{
			Operation: admissionv1.Create,
			Resource:  webhooks.VirtualMachineInstanceGroupVersionResource,
			Object:    runtime.RawExtension{Raw: raw},
		},
	}

	admitter := &admitters.VMICreateAdmitter{
		ClusterConfig: cfg,
		// Same extra validator virt-api registers for VMI create
		// (pkg/virt-api/api.go registerValidatingWebhooks).
		SpecValidators: []admitters.SpecValidator{netSpecValidator},
	}
	resp := admitter.Admit(context.Background(), ar)
	if resp.Allowed {
		return nil
	}
	if resp.Result != nil && resp.Result.Details != nil && len(resp.Result.Details.Causes) > 0 {
		return resp.Result.Details.Causes
	}
	// Rejections without causes (e.g. JSON decode errors) carry only a message.
	msg := "rejected without details"
	if resp.Result != nil {
		msg = resp.Result.Message
	}
	return []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Message: msg}}
}

// ValidateVM runs what virt-api does on VirtualMachine CREATE, as far as it applies to the
// VMs isochron renders (no instance types, no DataVolume templates, no volume requests):
//
//  1. the mutating webhook's defaults (defaults.SetVirtualMachineDefaults: architecture,
//     machine type);
//  2. the validating webhook (VMsAdmitter.Admit) on a copy with the VMI defaults set
//     (defaults.SetDefaultVirtualMachineInstanceSpec): feature gates, the network
//     validator's creation checks, and ValidateVirtualMachineSpec, which validates the
//     template's metadata and spec as a VMI's, the run strategy and the live-update
//     features.
//
// A nil result means KubeVirt would admit the VM.
func ValidateVM(vm *kubevirtv1.VirtualMachine, featureGates []string) []metav1.StatusCause {
	cfg, err := newClusterConfig(featureGates)
	if err != nil {
		return harnessError(err)
	}
	vm = vm.DeepCopy()
	if vm.Spec.Template == nil {
		return []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueRequired, Field: "spec.template", Message: "missing virtual machine template."}}
	}
	defaults.SetVirtualMachineDefaults(vm, cfg, nil)
	if err := defaults.SetDefaultVirtualMachineInstanceSpec(cfg, &vm.Spec.Template.Spec); err != nil {
		return harnessError(err)
	}
	if causes := featuregate.ValidateFeatureGates(featureGates, &vm.Spec.Template.Spec); len(causes) > 0 {
		return causes
	}
	if causes := netadmitter.NewValidator(k8sfield.NewPath("spec"), &vm.Spec.Template.Spec, cfg).ValidateCreation(); len(causes) > 0 {
		return causes
	}
	return admitters.ValidateVirtualMachineSpec(k8sfield.NewPath("spec"), &vm.Spec, cfg, false)
}

// newClusterConfig builds a virtconfig.ClusterConfig the way KubeVirt's unit
// tests do (pkg/testutils.NewFakeClusterConfigUsingKV), without importing
// pkg/testutils, which drags in gomega. The informers are never started;
// ClusterConfig only reads their stores, which we fill directly.
func newClusterConfig(featureGates []string) (*virtconfig.ClusterConfig, error) {
	return newClusterConfigFor(kubevirtv1.KubeVirtConfiguration{}, featureGates)
}

// newClusterConfigFor is newClusterConfig for a KubeVirt CR whose spec.configuration is
// c, with featureGates added to its developer configuration.
func newClusterConfigFor(c kubevirtv1.KubeVirtConfiguration, featureGates []string) (*virtconfig.ClusterConfig, error) {
	const ns = "kubevirt"
	c = *c.DeepCopy()
	if c.DeveloperConfiguration == nil {
		c.DeveloperConfiguration = &kubevirtv1.DeveloperConfiguration{}
	}
	c.DeveloperConfiguration.FeatureGates = append(c.DeveloperConfiguration.FeatureGates, featureGates...)
	kv := &kubevirtv1.KubeVirt{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "kubevirt",
			Namespace: ns,
			// ClusterConfig caches by resourceVersion; any non-empty value works
			// because each call gets a fresh ClusterConfig.
			ResourceVersion: "1",
		},
		Spec: kubevirtv1.KubeVirtSpec{Configuration: c},
		Status: kubevirtv1.KubeVirtStatus{
			// A CR without a phase is ignored by ClusterConfig.
			Phase:               kubevirtv1.KubeVirtPhaseDeployed,
			DefaultArchitecture: Architecture,
		},
	}

	crdInformer := cache.NewSharedIndexInformer(&cache.ListWatch{}, &extv1.CustomResourceDefinition{}, 0, cache.Indexers{})
	kvInformer := cache.NewSharedIndexInformer(&cache.ListWatch{}, &kubevirtv1.KubeVirt{}, 0, cache.Indexers{})
	if err := kvInformer.GetStore().Add(kv); err != nil {
		return nil, err
	}
	return virtconfig.NewClusterConfigWithCPUArch(crdInformer, kvInformer, ns, Architecture)
}

// netSpecValidator is the closure virt-api passes to ServeVMICreate.
func netSpecValidator(field *k8sfield.Path, spec *kubevirtv1.VirtualMachineInstanceSpec, cfg *virtconfig.ClusterConfig) []metav1.StatusCause {
	return netadmitter.Validate(field, spec, cfg)
}

func harnessError(err error) []metav1.StatusCause {
	return []metav1.StatusCause{{
		Type:    metav1.CauseTypeUnexpectedServerResponse,
		Message: "admission harness: " + err.Error(),
	}}
}
