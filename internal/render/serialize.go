package render

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// Unstructured converts a rendered object into the form isochron applies: only the
// fields isochron sets, without the empty status and creationTimestamp that Go's zero
// values would otherwise claim under server-side apply.
func Unstructured(obj runtime.Object) (*unstructured.Unstructured, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encoding %T: %w", obj, err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decoding %T: %w", obj, err)
	}
	delete(m, "status")
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// YAML serialises a rendered object as isochron applies it, with sorted keys.
func YAML(obj runtime.Object) ([]byte, error) {
	u, err := Unstructured(obj)
	if err != nil {
		return nil, err
	}
	return yaml.Marshal(u.Object)
}
