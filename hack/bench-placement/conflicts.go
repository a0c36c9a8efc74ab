package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// statusWrites is what the API server counted of the crawlers' status writes
// (apiserver_request_total for crawlervms/status, PATCH): all of them, and those refused
// for a conflict (409: the object has been modified since the copy the patch was made
// from). The manager is the only one that writes crawlers' status in this benchmark.
type statusWrites struct{ total, conflicts float64 }

// crawlerStatusWrites reads them from the API server's metrics.
func crawlerStatusWrites(ctx context.Context, cfg *rest.Config) (statusWrites, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return statusWrites{}, err
	}
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return statusWrites{}, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	return parseStatusWrites(raw)
}

// parseStatusWrites sums apiserver_request_total's samples of PATCHes of crawlervms'
// status in Prometheus' text format.
func parseStatusWrites(raw []byte) (statusWrites, error) {
	var w statusWrites
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="crawlervms"`) ||
			!strings.Contains(line, `subresource="status"`) || !strings.Contains(line, `verb="PATCH"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return w, err
		}
		w.total += v
		if strings.Contains(line, `code="409"`) {
			w.conflicts += v
		}
	}
	return w, sc.Err()
}
