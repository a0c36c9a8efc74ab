// Package testcases holds test inputs shared by the offline and the API-server tests,
// so both judge the same objects.
package testcases

import (
	"strings"

	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

// Valid is a minimal CrawlerVM that the API accepts. Invalid cases edit a copy of it.
const Valid = `apiVersion: isochron.io/v1alpha1
kind: CrawlerVM
metadata:
  name: minimal
  namespace: default
spec:
  rps: 400
  errorBudget:
    tolerance: 10ms
  guest:
    image: quay.io/org/crawler:1
    memory: 2Gi
`

// Invalid is an object (a CrawlerVM unless Base says otherwise) that must be refused.
type Invalid struct {
	// Base is the object the case edits, as YAML; empty for Valid.
	Base string
	// Set are dotted paths under spec (or from the root when they start with
	// "metadata.") and their YAML values, applied to Base; a nil value removes the field.
	Set map[string]any
	// Field and Message must both appear in the refusal.
	Field, Message string
}

// InvalidCrawlerVMs are refused, each with a message naming the field.
var InvalidCrawlerVMs = map[string]Invalid{
	"rps zero":                 {Set: map[string]any{"rps": 0}, Field: "spec.rps", Message: "should be greater than or equal to 1"},
	"rps above 100000":         {Set: map[string]any{"rps": 100001}, Field: "spec.rps", Message: "should be less than or equal to 100000"},
	"rps missing":              {Set: map[string]any{"rps": nil}, Field: "spec.rps", Message: "Required value"},
	"errorBudget missing":      {Set: map[string]any{"errorBudget": nil}, Field: "spec.errorBudget", Message: "Required value"},
	"tolerance zero":           {Set: map[string]any{"errorBudget.tolerance": "0s"}, Field: "spec.errorBudget.tolerance", Message: "must be greater than 0 and at most 10s"},
	"tolerance above 10s":      {Set: map[string]any{"errorBudget.tolerance": "11s"}, Field: "spec.errorBudget.tolerance", Message: "must be greater than 0 and at most 10s"},
	"tolerance not a duration": {Set: map[string]any{"errorBudget.tolerance": "ten"}, Field: "spec.errorBudget.tolerance", Message: "should match"},
	"objective below 90":       {Set: map[string]any{"errorBudget.objective": "89.9"}, Field: "spec.errorBudget.objective", Message: "must be a percentage >= 90 and < 100"},
	"objective 100":            {Set: map[string]any{"errorBudget.objective": "100"}, Field: "spec.errorBudget.objective", Message: "must be a percentage >= 90 and < 100"},
	"objective not a number":   {Set: map[string]any{"errorBudget.objective": "five nines"}, Field: "spec.errorBudget.objective", Message: "should match"},
	"objective seven decimals": {Set: map[string]any{"errorBudget.objective": "99.9999999"}, Field: "spec.errorBudget.objective", Message: "at most six decimals"},
	"image empty":              {Set: map[string]any{"guest.image": ""}, Field: "spec.guest.image", Message: "should be at least 1 chars long"},
	"memory below 256Mi":       {Set: map[string]any{"guest.memory": "128Mi"}, Field: "spec.guest.memory", Message: "must be at least 256Mi"},
	"memory missing":           {Set: map[string]any{"guest.memory": nil}, Field: "spec.guest.memory", Message: "Required value"},
	"user data too long":       {Set: map[string]any{"guest.cloudInitUserData": strings.Repeat("x", 1025)}, Field: "spec.guest.cloudInitUserData", Message: "may not be more than 1024"},
	"cpuPlacement unknown":     {Set: map[string]any{"cpuPlacement": "isolated"}, Field: "spec.cpuPlacement", Message: `supported values: "dedicated", "shared"`},
	"rtNIC without deadline": {Set: map[string]any{"rtNIC": map[string]any{"networkName": "rt-net", "minBandwidth": "100M"}},
		Field: "spec.rtNIC.deadline", Message: "Required value"},
	"rtNIC deadline above 1s": {Set: map[string]any{"rtNIC": map[string]any{"networkName": "rt-net", "deadline": "2s", "minBandwidth": "100M"}},
		Field: "spec.rtNIC.deadline", Message: "must be greater than 0 and at most 1s"},
	"rtNIC bandwidth zero": {Set: map[string]any{"rtNIC": map[string]any{"networkName": "rt-net", "deadline": "5ms", "minBandwidth": "0"}},
		Field: "spec.rtNIC.minBandwidth", Message: "must be a positive number of bits per second"},
	"rtNIC network name with upper case": {Set: map[string]any{"rtNIC": map[string]any{"networkName": "BMS/RT", "deadline": "5ms", "minBandwidth": "1G"}},
		Field: "spec.rtNIC.networkName", Message: "must be name or namespace/name"},
	"placement policy unknown": {Set: map[string]any{"placement": map[string]any{"policy": "random"}}, Field: "spec.placement.policy", Message: `supported values: "pack", "spread"`},
	"probe duration below 10s": {Set: map[string]any{"probe": map[string]any{"duration": "5s"}}, Field: "spec.probe.duration", Message: "must be at least 10s and at most 24h"},
	"probe duration above 24h": {Set: map[string]any{"probe": map[string]any{"duration": "25h"}}, Field: "spec.probe.duration", Message: "must be at least 10s and at most 24h"},
	"name with a dot":          {Set: map[string]any{"metadata.name": "tower.a"}, Field: "metadata.name", Message: "at most 57 characters"},
	"name too long":            {Set: map[string]any{"metadata.name": strings.Repeat("a", 58)}, Field: "metadata.name", Message: "<name>-probe"},
	"name starting with digit": {Set: map[string]any{"metadata.name": "1tower"}, Field: "metadata.name", Message: "must start with a lower-case letter"},
	"probe schedule not cron":  {Set: map[string]any{"probe": map[string]any{"schedule": "every hour"}}, Field: "spec.probe.schedule", Message: "must be a cron schedule"},
}

// Object is Base with the case's edits applied, as an unstructured object.
func (c Invalid) Object() map[string]any {
	base := c.Base
	if base == "" {
		base = Valid
	}
	obj := decoded(base)
	for path, v := range c.Set {
		parts := strings.Split(path, ".")
		m := obj["spec"].(map[string]any)
		if parts[0] == "metadata" {
			m = obj
		}
		for _, p := range parts[:len(parts)-1] {
			m = m[p].(map[string]any)
		}
		if v == nil {
			delete(m, parts[len(parts)-1])
		} else {
			m[parts[len(parts)-1]] = v
		}
	}
	return obj
}

// ValidObject is Valid as the API server decodes it (whole numbers as int64).
func ValidObject() map[string]any { return decoded(Valid) }

// decoded is the YAML object y as the API server decodes it.
func decoded(y string) map[string]any {
	j, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		panic(err)
	}
	obj := map[string]any{}
	if err := utiljson.Unmarshal(j, &obj); err != nil {
		panic(err)
	}
	return obj
}
