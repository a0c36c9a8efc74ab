package main

import "testing"

func TestParseStatusWrites(t *testing.T) {
	raw := []byte(`# HELP apiserver_request_total Counter of apiserver requests
apiserver_request_total{code="200",component="apiserver",dry_run="",group="isochron.io",resource="crawlervms",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 2000
apiserver_request_total{code="409",component="apiserver",dry_run="",group="isochron.io",resource="crawlervms",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 37
apiserver_request_total{code="200",component="apiserver",dry_run="",group="isochron.io",resource="crawlervms",scope="resource",subresource="",verb="PATCH",version="v1alpha1"} 5
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 9
`)
	w, err := parseStatusWrites(raw)
	if err != nil {
		t.Fatal(err)
	}
	if w.total != 2037 || w.conflicts != 37 {
		t.Errorf("%+v, want 2037 status writes of crawlers, 37 conflicts", w)
	}
}
