package virtsim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// --- virt-api's migration admission (pkg/virt-api/webhooks/validating-webhook/admitters/
// migration-create-admitter.go) ------------------------------------------------------

// migrationCreatePath is where virt-api serves the migration create admitter
// (pkg/virt-api/api.go, MigrationCreateValidatePath).
const migrationCreatePath = "/migration-validate-create"

// Webhooks is virt-api's validating webhook for migrations, for envtest to install
// (envtest.WebhookInstallOptions.ValidatingWebhooks points it at the simulation's
// server, WithAdmission).
func Webhooks() []*admissionregistrationv1.ValidatingWebhookConfiguration {
	return []*admissionregistrationv1.ValidatingWebhookConfiguration{{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: "virt-api-validator"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "migration-create-validator.kubevirt.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
				Namespace: "kubevirt", Name: "virt-api", Path: ptr.To(migrationCreatePath)}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{kubevirtv1.SchemeGroupVersion.Group}, APIVersions: []string{"v1"},
					Resources: []string{"virtualmachineinstancemigrations"}},
			}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}}
}

// WithAdmission serves virt-api's migration admission (Webhooks) where envtest, started
// with those webhooks, points the API server (opts after envtest.Environment.Start).
func WithAdmission(opts envtest.WebhookInstallOptions) Option {
	return func(o *options) { o.admission = &opts }
}

// Option changes what Start starts.
type Option func(*options)

type options struct {
	admission *envtest.WebhookInstallOptions
}

func (s *Sim) webhookServer(opts *envtest.WebhookInstallOptions) webhook.Server {
	srv := webhook.NewServer(webhook.Options{Host: opts.LocalServingHost, Port: opts.LocalServingPort, CertDir: opts.LocalServingCertDir})
	srv.Register(migrationCreatePath, &webhook.Admission{Handler: admission.HandlerFunc(s.admitMigration)})
	return srv
}

// admitMigration is MigrationCreateAdmitter.Admit, for what isochron's migrations can
// meet: the VMI must exist, not be final, be live-migratable (isMigratable), and have no
// migration in flight (ensureNoMigrationConflict, which KubeVirt selects by the
// kubevirt.io/vmi-name label its mutator adds; here by spec.vmiName). Each refusal is
// webhookutils.ToAdmissionResponseError's: 400 with the message.
func (s *Sim) admitMigration(ctx context.Context, req admission.Request) admission.Response {
	mig := &kubevirtv1.VirtualMachineInstanceMigration{}
	if err := json.Unmarshal(req.Object.Raw, mig); err != nil {
		return refuse(err.Error())
	}
	ns := req.Namespace
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := s.reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: mig.Spec.VMIName}, vmi); err != nil {
		if apierrors.IsNotFound(err) {
			return refuse(fmt.Sprintf("the VMI \"%s/%s\" does not exist", ns, mig.Spec.VMIName))
		}
		return refuse(err.Error())
	}
	if vmi.IsFinal() {
		return refuse("Cannot migrate VMI in finalized state.")
	}
	for _, c := range vmi.Status.Conditions {
		if c.Type == kubevirtv1.VirtualMachineInstanceIsMigratable && c.Status == corev1.ConditionFalse {
			return refuse(fmt.Sprintf("Cannot migrate VMI, Reason: %s, Message: %s", c.Reason, c.Message))
		}
	}
	migs := &kubevirtv1.VirtualMachineInstanceMigrationList{}
	if err := s.reader.List(ctx, migs, client.InNamespace(ns)); err != nil {
		return refuse(err.Error())
	}
	for _, m := range migs.Items {
		if m.Spec.VMIName != mig.Spec.VMIName || m.Status.Phase == kubevirtv1.MigrationSucceeded || m.Status.Phase == kubevirtv1.MigrationFailed {
			continue
		}
		return refuse(fmt.Sprintf("in-flight migration detected. Active migration job (%s) is currently already in progress for VMI %s.", m.UID, m.Spec.VMIName))
	}
	return admission.Allowed("")
}

// refuse is webhookutils.ToAdmissionResponseError: not allowed, 400, the message.
func refuse(message string) admission.Response {
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{
		Result: &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusBadRequest, Message: message}}}
}
