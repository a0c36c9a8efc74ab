// Package validation checks and defaults objects offline with the schema, CEL rules and
// defaults of their CustomResourceDefinition, using the API server's own code, so that
// the CLI accepts and refuses exactly what `kubectl apply` would.
package validation

import (
	"context"
	"fmt"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// Validator validates and defaults objects of one CRD version.
type Validator struct {
	structural *structuralschema.Structural
	schema     apiservervalidation.SchemaValidator
	cel        *cel.Validator
}

// New builds a Validator for the named version of the CRD in crdYAML.
func New(crdYAML []byte, version string) (*Validator, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(crdYAML, crd); err != nil {
		return nil, fmt.Errorf("decoding CRD: %w", err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name != version || v.Schema == nil {
			continue
		}
		internal := &apiextensionsinternal.JSONSchemaProps{}
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, internal, nil); err != nil {
			return nil, fmt.Errorf("converting schema: %w", err)
		}
		s, err := structuralschema.NewStructural(internal)
		if err != nil {
			return nil, fmt.Errorf("structural schema: %w", err)
		}
		sv, _, err := apiservervalidation.NewSchemaValidator(internal)
		if err != nil {
			return nil, fmt.Errorf("schema validator: %w", err)
		}
		return &Validator{structural: s, schema: sv, cel: cel.NewValidator(s, true, celconfig.PerCallLimit)}, nil
	}
	return nil, fmt.Errorf("CRD %s has no schema for version %s", crd.Name, version)
}

// DefaultAndValidate refuses unknown fields (as kubectl's strict field validation
// does), applies the schema's defaults to obj in place, and checks it against the
// schema and CEL rules, as the API server does on create.
func (v *Validator) DefaultAndValidate(ctx context.Context, obj map[string]any) field.ErrorList {
	var errs field.ErrorList
	unknown := structuralpruning.PruneWithOptions(obj, v.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	for _, p := range unknown {
		errs = append(errs, field.Forbidden(field.NewPath(p), "unknown field; remove it or fix its spelling"))
	}
	structuraldefaulting.Default(obj, v.structural)
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj, v.schema)...)
	celErrs, _ := v.cel.Validate(ctx, nil, v.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}
