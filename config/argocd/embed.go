// Package argocd embeds isochron's Argo CD health check, so that tests run exactly the
// Lua that users install.
package argocd

import _ "embed"

// HealthLua is the Lua health check of CrawlerVMs (health.lua).
//
//go:embed health.lua
var HealthLua string

// ConfigMapPatch is the argocd-cm patch that installs HealthLua (argocd-cm-patch.yaml).
//
//go:embed argocd-cm-patch.yaml
var ConfigMapPatch []byte

// HealthKey is the argocd-cm key Argo CD reads the health check of CrawlerVMs from.
const HealthKey = "resource.customizations.health.isochron.io_CrawlerVM"
