package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/version"
)

func TestParseProbeCPU(t *testing.T) {
	tests := map[string]struct {
		in, want, err string
	}{
		"one CPU":    {in: "1", want: "1"},
		"millicores": {in: "200m", want: "200m"},
		"zero":       {in: "0", err: "must be positive"},
		"negative":   {in: "-1", err: "must be positive"},
		"not a CPU":  {in: "one", err: "is not a CPU quantity"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			q, err := parseProbeCPU(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "--probe-cpu") {
					t.Fatalf("parseProbeCPU(%q) error %v, want one naming --probe-cpu with %q", tc.in, err, tc.err)
				}
				return
			}
			if err != nil || q.String() != tc.want {
				t.Fatalf("parseProbeCPU(%q) = %s, %v; want %s", tc.in, q.String(), err, tc.want)
			}
		})
	}
}

func TestParseNamespaces(t *testing.T) {
	tests := map[string]struct {
		in   string
		want []string
		err  string
	}{
		"none":              {in: ""},
		"one":               {in: "rt-shared", want: []string{"rt-shared"}},
		"spaces and commas": {in: " rt-shared , kube-system,", want: []string{"rt-shared", "kube-system"}},
		"not a name":        {in: "rt-shared,RT_Net", err: `"RT_Net" is not a namespace name`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseNamespaces(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "--shared-network-namespaces") {
					t.Fatalf("parseNamespaces(%q) error %v, want one naming the flag with %q", tc.in, err, tc.err)
				}
				return
			}
			if err != nil || strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("parseNamespaces(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

// The administrator's network settings reach the manager as environment variables that
// are unset while their ConfigMap keys are missing (config/manager); a flag given wins.
func TestNetworkFlags(t *testing.T) {
	env := map[string]string{isov1.EnvSharedNetworkNamespaces: "rt-shared", isov1.EnvRTUplinks: "eth1"}
	tests := map[string]struct {
		env                   map[string]string
		args                  []string
		wantShared, wantLinks string
	}{
		"no key set, no flag":  {},
		"from the environment": {env: env, wantShared: "rt-shared", wantLinks: "eth1"},
		"flags without the environment": {args: []string{"--shared-network-namespaces=tenant-b", "--rt-uplinks=eth2"},
			wantShared: "tenant-b", wantLinks: "eth2"},
		"a flag wins over the environment": {env: env, args: []string{"--rt-uplinks=eth2"}, wantShared: "rt-shared", wantLinks: "eth2"},
		"an empty flag wins too":           {env: env, args: []string{"--shared-network-namespaces="}, wantLinks: "eth1"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fs := flag.NewFlagSet("manager", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			shared, uplinks := networkFlags(fs, func(k string) string { return tc.env[k] })
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if *shared != tc.wantShared || *uplinks != tc.wantLinks {
				t.Errorf("env %v, args %q: --shared-network-namespaces %q, --rt-uplinks %q; want %q, %q",
					tc.env, tc.args, *shared, *uplinks, tc.wantShared, tc.wantLinks)
			}
		})
	}
}

// The manager's endpoint serves isochron_build_info: 1, labelled with its build.
func TestRegisterBuildInfo(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	build := version.Info{Version: "v0.1.0-g0c0f4edab428", Commit: "0c0f4edab4286f4ee76fd3f14d399e54c9d5f0f0", Date: "2026-05-04T10:00:00Z", GoVersion: "go1.26.8"}
	if err := registerBuildInfo(reg, build); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	type series struct {
		Name   string
		Labels map[string]string
		Value  float64
	}
	var got []series
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got = append(got, series{Name: f.GetName(), Labels: labels, Value: m.GetGauge().GetValue()})
		}
	}
	want := []series{{
		Name:   "isochron_build_info",
		Labels: map[string]string{"version": "v0.1.0-g0c0f4edab428", "commit": "0c0f4edab4286f4ee76fd3f14d399e54c9d5f0f0", "goversion": "go1.26.8"},
		Value:  1,
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("registry after registerBuildInfo (-want +got):\n%s", diff)
	}
	if err := registerBuildInfo(reg, build); err == nil {
		t.Error("isochron_build_info registered twice on one registry")
	}
}

func TestCheckSecretName(t *testing.T) {
	for name, want := range map[string]string{
		"":               "",
		"registry-creds": "",
		"Registry_Creds": `--probe-image-pull-secret="Registry_Creds" cannot name a Secret`,
	} {
		err := checkSecretName("--probe-image-pull-secret", name)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("checkSecretName(%q) = %v, want %q", name, err, want)
		}
	}
}
