// Package controllers holds isochron's reconcilers. They are I/O glue: they gather the
// inputs, call the pure core in internal/ to size, place, render and judge, write the
// results with server-side apply, and patch status only when it changed, so a steady
// cluster produces no writes.
//
// A reconcile of a CrawlerVM (Reconcile) gathers the crawler into a scope, whose inputs
// (its VM, VMI, launcher pods and node, its RT network, KubeVirt's settings, its placement
// request) are each read at most once, on first use; it runs the phases in order
// (CrawlerVMReconciler.phases), each of which may stop the reconcile and says when to look
// again; and it writes the status once, at the end. The one exception is a change of the
// crawler's reservation, which goes through the placer (internal/placer, the one door)
// and is written before anything is done on it (reserve).
//
// Files: crawlervm_controller.go (the reconciler, its phases), crawlervm_scope.go (what a
// reconcile reads), crawlervm_status.go (the status and how it is written),
// crawlervm_place.go (placement and the one persist site), crawlervm_vm.go and
// crawlervm_adopt.go (the VM, judged then written), crawlervm_move.go (the move engine),
// crawlervm_migrate.go (carrying a move out, migrations asked for outside isochron),
// crawlervm_triggers.go (what makes a crawler move), crawlervm_downtime.go (outages and
// idle reservations), the probes and calibration, the watches and their triggers, and
// the manager's setup and lifecycle.
package controllers
