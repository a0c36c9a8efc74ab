// Package policies holds config/admission's ValidatingAdmissionPolicies to the Go code
// that enforces the same rules: for each rule written twice (the policy refuses it at
// admission; the manager refuses what was applied before the policy, or without it, or
// renders what the policy must admit), a table of inputs is judged by both, and the test
// fails where they differ. The policies are compiled and evaluated by kube-apiserver's
// own code (k8s.io/apiserver's validating admission policy plugin, at the version the
// operator builds against), without an API server: test/deploy installs them on a real
// one and checks a few requests end to end.
package policies

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
)

// policy is one ValidatingAdmissionPolicy of config/admission, compiled.
type policy struct {
	vap       *admissionregistrationv1.ValidatingAdmissionPolicy
	validator validating.Validator
}

// policyOf reads the ValidatingAdmissionPolicy name (as config/admission names it,
// before config/default's prefix isochron-) from config/admission/file and compiles it as
// kube-apiserver does (validating.compilePolicy, which is not exported: the same calls).
func policyOf(t *testing.T, file, name string) *policy {
	t.Helper()
	data, err := os.ReadFile("../../config/admission/" + file)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		vap := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		err := dec.Decode(vap)
		if errors.Is(err, io.EOF) {
			t.Fatalf("config/admission/%s has no ValidatingAdmissionPolicy %s", file, name)
		}
		if err != nil {
			t.Fatalf("config/admission/%s: %v", file, err)
		}
		if vap.Kind == "ValidatingAdmissionPolicy" && vap.Name == name {
			return &policy{vap: vap, validator: compile(t, vap)}
		}
	}
}

func compile(t *testing.T, vap *admissionregistrationv1.ValidatingAdmissionPolicy) validating.Validator {
	t.Helper()
	hasParams := vap.Spec.ParamKind != nil
	vars := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}
	messageVars := plugincel.OptionalVariableDeclarations{HasParams: hasParams}
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		t.Fatal(err)
	}
	var variables []plugincel.NamedExpressionAccessor
	for _, v := range vap.Spec.Variables {
		variables = append(variables, &validating.Variable{Name: v.Name, Expression: v.Expression})
	}
	compiler.CompileAndStoreVariables(variables, vars, environment.StoredExpressions)
	var matcher matchconditions.Matcher
	if len(vap.Spec.MatchConditions) > 0 {
		var conditions []plugincel.ExpressionAccessor
		for i := range vap.Spec.MatchConditions {
			conditions = append(conditions, (*matchconditions.MatchCondition)(&vap.Spec.MatchConditions[i]))
		}
		matcher = matchconditions.NewMatcher(compiler.CompileCondition(conditions, vars, environment.StoredExpressions),
			vap.Spec.FailurePolicy, "policy", "validate", vap.Name)
	}
	validations := make([]plugincel.ExpressionAccessor, len(vap.Spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(vap.Spec.Validations))
	for i, v := range vap.Spec.Validations {
		validations[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	return validating.NewValidator(
		compiler.CompileCondition(validations, vars, environment.StoredExpressions),
		matcher,
		compiler.CompileCondition(nil, vars, environment.StoredExpressions),
		compiler.CompileCondition(messages, messageVars, environment.StoredExpressions),
		vap.Spec.FailurePolicy, nil)
}

// request is a write the API server asks the policy to judge.
type request struct {
	op          admission.Operation
	resource    schema.GroupVersionResource
	kind        schema.GroupVersionKind
	subresource string
	// object and oldObject as the API server hands them to admission: a built-in kind's
	// typed object (as defaulting leaves it: the tests give what the manager writes,
	// which test/deploy's real API server defaults), a custom resource's unstructured
	// (custom, below). oldObject is nil on CREATE.
	object, oldObject runtime.Object
	user              user.Info
	// params is the binding's parameter (a ConfigMap, the manager's Deployment); nil
	// where the policy takes none.
	params runtime.Object
}

// custom is obj as kube-apiserver hands a custom resource (a CrawlerVM, KubeVirt's
// VirtualMachine or VMI) to admission: unstructured, as its JSON.
func custom(t *testing.T, obj runtime.Object) *unstructured.Unstructured {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// judge says whether p admits r and, when it refuses, its message. It fails the test
// where r is not among the requests p's matchConstraints send it (a table whose rows
// the policy never sees pins nothing), and where an expression fails to evaluate.
func (p *policy) judge(t *testing.T, r request) (admitted bool, message string) {
	t.Helper()
	if !p.sees(r) {
		t.Fatalf("policy %s is never asked about %s of %s/%s", p.vap.Name, r.op, r.resource.Resource, r.subresource)
	}
	meta := r.object
	if meta == nil {
		meta = r.oldObject
	}
	m, err := apimeta(meta)
	if err != nil {
		t.Fatal(err)
	}
	attrs := admission.NewAttributesRecord(r.object, r.oldObject, r.kind, m.GetNamespace(), m.GetName(), r.resource, r.subresource, r.op, nil, false, r.user)
	versioned := &admission.VersionedAttributes{Attributes: attrs, VersionedKind: r.kind,
		VersionedObject: admission.NewLazyObject(r.object), VersionedOldObject: admission.NewLazyObject(r.oldObject)}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: m.GetNamespace()}}
	res := p.validator.Validate(context.Background(), r.resource, versioned, r.params, ns, celconfig.RuntimeCELCostBudget, nil)
	for _, d := range res.Decisions {
		if d.Evaluation == validating.EvalError {
			t.Fatalf("policy %s cannot judge %s %s/%s: %s", p.vap.Name, r.op, m.GetNamespace(), m.GetName(), d.Message)
		}
		if d.Action == validating.ActionDeny {
			return false, d.Message
		}
	}
	return true, ""
}

func apimeta(obj runtime.Object) (metav1.Object, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u, nil
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, errors.New("an object without metadata")
	}
	return m, nil
}

// sees says whether p's matchConstraints send it r (its resource rules; the policies
// use no namespace or object selector).
func (p *policy) sees(r request) bool {
	mc := p.vap.Spec.MatchConstraints
	if mc == nil {
		return false
	}
	resource := r.resource.Resource
	if r.subresource != "" {
		resource += "/" + r.subresource
	}
	anyOf := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	for _, rule := range mc.ResourceRules {
		ops := make([]string, len(rule.Operations))
		for i, op := range rule.Operations {
			ops[i] = string(op)
		}
		if anyOf(ops, string(r.op)) && anyOf(rule.APIGroups, r.resource.Group) && anyOf(rule.APIVersions, r.resource.Version) &&
			(slices.Contains(rule.Resources, resource) || slices.Contains(rule.Resources, "*/*") || r.subresource == "" && slices.Contains(rule.Resources, "*")) {
			return true
		}
	}
	return false
}

// The users whose writes the policies tell apart.
var (
	// tenant is a namespace's editor.
	tenant = &user.DefaultInfo{Name: "alice", Groups: []string{"system:authenticated"}}
	// kubevirt is one of KubeVirt's components (the ServiceAccounts of its namespace).
	kubevirt = &user.DefaultInfo{Name: "system:serviceaccount:kubevirt:kubevirt-controller",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kubevirt", "system:authenticated"}}
	// manager is isochron's manager, as config/default installs it.
	manager = &user.DefaultInfo{Name: "system:serviceaccount:isochron-system:isochron-controller-manager",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:isochron-system", "system:authenticated"}}
)

// The resources the policies judge.
var (
	crawlervms  = schema.GroupVersionResource{Group: "isochron.io", Version: "v1alpha1", Resource: "crawlervms"}
	crawlerKind = schema.GroupVersionKind{Group: "isochron.io", Version: "v1alpha1", Kind: "CrawlerVM"}
	pods        = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	podKind     = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
)
