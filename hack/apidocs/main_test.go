package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/utils/ptr"
)

const root = "../.."

// TestReferenceIsCurrent fails when docs/api.md is not what the CRDs make: run make
// api-docs and commit the result with the API change.
func TestReferenceIsCurrent(t *testing.T) {
	want, err := generate(filepath.Join(root, "config/crd/bases"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "docs/api.md"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(strings.Split(string(want), "\n"), strings.Split(string(got), "\n")); diff != "" {
		t.Errorf("docs/api.md is stale: run make api-docs (-generated +docs/api.md):\n%s", diff)
	}
}

// TestEveryKindAndField checks that the reference has each kind's spec and status and a
// row for every field of the CRDs.
func TestEveryKindAndField(t *testing.T) {
	crds, err := load(filepath.Join(root, "config/crd/bases"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := render(crds)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	var kinds []string
	for _, crd := range crds {
		kinds = append(kinds, crd.Spec.Names.Kind)
		if !strings.Contains(doc, "\n## "+crd.Spec.Names.Kind+"\n") {
			t.Errorf("no heading for the kind %s", crd.Spec.Names.Kind)
		}
		var walk func(path string, s apiextv1.JSONSchemaProps)
		walk = func(path string, s apiextv1.JSONSchemaProps) {
			if !strings.Contains(doc, "| `"+path+"` |") {
				t.Errorf("%s: no row for %s", crd.Name, path)
			}
			for name, p := range s.Properties {
				walk(path+"."+name, p)
			}
			if s.Items != nil && s.Items.Schema != nil {
				for name, p := range s.Items.Schema.Properties {
					walk(path+"[]."+name, p)
				}
			}
		}
		props := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties
		for _, part := range []string{"spec", "status"} {
			if s, ok := props[part]; ok {
				if !strings.Contains(doc, "\n### "+crd.Spec.Names.Kind+" "+part+"\n") {
					t.Errorf("no heading for the %s of %s", part, crd.Spec.Names.Kind)
				}
				walk(part, s)
			}
		}
	}
	if diff := cmp.Diff([]string{"CrawlerVM", "ContentionProfile", "NodeCalibration"}, kinds); diff != "" {
		t.Errorf("kinds, in order (-want +got):\n%s", diff)
	}
}

func TestRow(t *testing.T) {
	tests := map[string]struct {
		schema   apiextv1.JSONSchemaProps
		required bool
		want     string
	}{
		"enum and default": {
			schema: apiextv1.JSONSchemaProps{Type: "string", Description: "policy is\npack or spread.",
				Enum: []apiextv1.JSON{{Raw: []byte(`"pack"`)}, {Raw: []byte(`"spread"`)}}, Default: &apiextv1.JSON{Raw: []byte(`"pack"`)}},
			want: "| `spec.x` | string | default `\"pack\"` | one of `pack`, `spread` | policy is pack or spread. |\n",
		},
		"bounds, pattern with a pipe, CEL message": {
			schema: apiextv1.JSONSchemaProps{Type: "string", MinLength: ptr.To[int64](1), MaxLength: ptr.To[int64](16), Pattern: "^(a|b)$",
				XValidations: apiextv1.ValidationRules{{Rule: "self != 'b'", Message: "x must not be b"}}},
			required: true,
			want:     "| `spec.x` | string | required | length 1 to 16; pattern `^(a\\|b)$`; rule: x must not be b |  |\n",
		},
		"integer range, exclusive minimum": {
			schema: apiextv1.JSONSchemaProps{Type: "integer", Format: "int32", Minimum: ptr.To(0.0), ExclusiveMinimum: true, Maximum: ptr.To(100.0)},
			want:   "| `spec.x` | integer (int32) | optional | > 0; <= 100 |  |\n",
		},
		"quantity": {
			schema: apiextv1.JSONSchemaProps{XIntOrString: true, Pattern: quantityPattern, Description: "memory, at least <256Mi>"},
			want:   "| `spec.x` | quantity | optional |  | memory, at least &lt;256Mi&gt; |\n",
		},
		"list map": {
			schema: apiextv1.JSONSchemaProps{Type: "array", MaxItems: ptr.To[int64](8), XListType: ptr.To("map"), XListMapKeys: []string{"type"},
				Items: &apiextv1.JSONSchemaPropsOrArray{Schema: &apiextv1.JSONSchemaProps{Type: "object"}}},
			want: "| `spec.x` | []object | optional | items at most 8; list map keyed by `type` |  |\n",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			fields(&b, "spec.x", tc.schema, tc.required)
			if diff := cmp.Diff(tc.want, b.String()); diff != "" {
				t.Errorf("row (-want +got):\n%s", diff)
			}
		})
	}
}
