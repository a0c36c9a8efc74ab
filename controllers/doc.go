// Package controllers holds isochron's reconcilers. They are I/O glue: they gather the
// inputs (the CrawlerVM, the node inventory, the crawlers already placed, the RT-NIC's
// NetworkAttachmentDefinition, the running VMI), call the pure core in internal/ to size,
// place and render, write the results with server-side apply, and patch status only when
// it changed, so a steady cluster produces no writes.
package controllers
