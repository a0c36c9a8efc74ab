package controllers

import (
	"context"

	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// StatusWriter is the reconciler's status writer, for tests of what it tells once the
// status is written.
type StatusWriter struct{ w *statusWriter }

// NewStatusWriter writes cvm's status changes with c, recording Events with rec.
func NewStatusWriter(c client.Client, rec record.EventRecorder, cvm *isov1.CrawlerVM) *StatusWriter {
	return &StatusWriter{&statusWriter{Client: c, recorder: rec, before: cvm.DeepCopy()}}
}

// After queues f until the status is written.
func (s *StatusWriter) After(f func()) { s.w.after(f) }

// Persist writes the status if it changed.
func (s *StatusWriter) Persist(ctx context.Context, cvm *isov1.CrawlerVM) error {
	return s.w.persist(ctx, cvm)
}
