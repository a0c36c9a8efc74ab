/*
Copyright 2026 The isochron Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Command registry serves an OCI distribution registry (the distribution project's own
// registry application, its filesystem storage) over plain HTTP, for the local cluster's
// containerd to pull a release from (make e2e-local-up starts it; make
// e2e-local-release pushes to it). distribution's cmd/registry would do, but links
// every cloud storage driver; this links only the filesystem one.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:5000", "address to listen on (plain HTTP: keep it on a loopback or private address)")
	root := flag.String("root", "", "directory the registry stores its blobs and manifests in (required)")
	flag.Parse()
	if err := run(*addr, *root); err != nil {
		fmt.Fprintln(os.Stderr, "registry:", err)
		os.Exit(1)
	}
}

func run(addr, root string) error {
	if root == "" {
		return errors.New("-root is required: the directory to store images in")
	}
	cfg := &configuration.Configuration{
		Storage: configuration.Storage{
			"filesystem": configuration.Parameters{"rootdirectory": root},
			// Uploads are never purged: a push interrupted by a stop resumes or restarts.
			"maintenance": configuration.Parameters{"uploadpurging": map[any]any{"enabled": false}},
		},
	}
	cfg.Log.Level = "warn"
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	app := handlers.NewApp(ctx, cfg)
	srv := &http.Server{Addr: addr, Handler: app, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	fmt.Printf("registry: serving http://%s from %s\n", addr, root)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(srv.Shutdown(shutdown), app.Shutdown())
}
