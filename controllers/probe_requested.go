package controllers

import (
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// probeRequested selects a crawler's updates that ask for a probe now
// (isov1.AnnotationProbeRequested, kubectl isochron probe): an annotation changes no
// generation, so without it the request would wait for the next reconcile.
var probeRequested = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetAnnotations()[isov1.AnnotationProbeRequested] != e.ObjectNew.GetAnnotations()[isov1.AnnotationProbeRequested]
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}
