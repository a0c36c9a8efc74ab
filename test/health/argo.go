// Package health runs isochron's Argo CD health check (config/argocd/health.lua) the way
// Argo CD runs a custom health check, so that the unit tests here and the integration
// tests in controllers judge objects exactly as an Argo CD controller would.
//
// It follows argo-cd util/lua (VM.runLua, ExecuteHealthLua, decodeValue) and
// gitops-engine pkg/health (GetResourceHealth), with these differences:
//   - Argo CD also opens its "safe" os library; this harness does not, so a script that
//     passes here never depends on it (isochron's does not use os).
//   - Argo CD encodes the returned table to JSON (layeh.com/gopher-json) and decodes
//     {status, message} from it; this harness reads the two fields from the table and
//     refuses anything but strings, where Argo CD would fail the JSON decoding.
//   - Recent Argo CD versions may leave metadata.managedFields and the last-applied
//     annotation out of obj; the script reads neither.
package health

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	lua "github.com/yuin/gopher-lua"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"isochron.io/isochron/config/argocd"
)

// The health codes of Argo CD (gitops-engine pkg/health).
const (
	Unknown     = "Unknown"
	Progressing = "Progressing"
	Healthy     = "Healthy"
	Suspended   = "Suspended"
	Degraded    = "Degraded"
	Missing     = "Missing"
)

// Status is what Argo CD shows of a resource's health.
type Status struct {
	Status  string
	Message string
}

// Argo is the health Argo CD gives obj with isochron's health check installed.
func Argo(obj *unstructured.Unstructured) (Status, error) {
	return Run(argocd.HealthLua, obj)
}

// Run is the health Argo CD gives obj with script as its custom health check. A script
// that fails is Unknown with the error, as in Argo CD.
func Run(script string, obj *unstructured.Unstructured) (Status, error) {
	// gitops-engine decides an object being deleted before any health check runs.
	if obj.GetDeletionTimestamp() != nil {
		return Status{Progressing, "Pending deletion"}, nil
	}
	hs, err := execute(script, obj)
	if err != nil {
		return Status{Unknown, err.Error()}, err
	}
	return hs, nil
}

// execute is argo-cd's VM.ExecuteHealthLua for a script from argocd-cm (useOpenLibs
// false: only the package, base and table libraries, and a one-second budget).
func execute(script string, obj *unstructured.Unstructured) (Status, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return Status{}, fmt.Errorf("opening Lua library %q: %w", lib.name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", decodeValue(l, obj.Object))
	if err := l.DoString(script); err != nil {
		return Status{}, err
	}
	ret, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return Status{}, fmt.Errorf("expect table output from Lua script, not %s", l.Get(-1).Type())
	}
	var hs Status
	for field, into := range map[string]*string{"status": &hs.Status, "message": &hs.Message} {
		switch v := ret.RawGetString(field).(type) {
		case lua.LString:
			*into = string(v)
		case *lua.LNilType:
		default:
			return Status{}, fmt.Errorf("health %s is a Lua %s, not a string", field, v.Type())
		}
	}
	switch hs.Status {
	case Unknown, Progressing, Healthy, Suspended, Degraded, Missing:
		return hs, nil
	}
	return Status{Unknown, "Lua returned an invalid health status"}, nil
}

// decodeValue turns an unstructured value into a Lua value as argo-cd's decodeValue
// does: maps become tables by key, slices tables from index 1, numbers (float64 from
// JSON, int64 from the API machinery) Lua numbers, json.Number a string, and any other
// Go type nil.
func decodeValue(l *lua.LState, value any) lua.LValue {
	switch v := value.(type) {
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case json.Number:
		return lua.LString(v)
	case int:
		return lua.LNumber(v)
	case int32:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case []any:
		arr := l.CreateTable(len(v), 0)
		for _, item := range v {
			arr.Append(decodeValue(l, item))
		}
		return arr
	case map[string]any:
		tbl := l.CreateTable(0, len(v))
		for key, item := range v {
			tbl.RawSetH(lua.LString(key), decodeValue(l, item))
		}
		return tbl
	}
	return lua.LNil
}

// ConfigMapScript is the health check the argocd-cm patch installs for CrawlerVMs.
func ConfigMapScript(patch []byte) (string, error) {
	cm := &corev1.ConfigMap{}
	if err := yaml.UnmarshalStrict(patch, cm); err != nil {
		return "", fmt.Errorf("reading the argocd-cm patch: %w", err)
	}
	if cm.Kind != "ConfigMap" || cm.Name != "argocd-cm" || cm.Namespace != "argocd" {
		return "", fmt.Errorf("the patch is for %s %s/%s, want ConfigMap argocd/argocd-cm", cm.Kind, cm.Namespace, cm.Name)
	}
	script, ok := cm.Data[argocd.HealthKey]
	if !ok {
		return "", fmt.Errorf("the argocd-cm patch has no key %s", argocd.HealthKey)
	}
	return script, nil
}
