// Package v1alpha1 contains the isochron.io/v1alpha1 API: CrawlerVM.
// +kubebuilder:object:generate=true
// +groupName=isochron.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "isochron.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this API with a scheme (each types file adds
	// its own, objectTypes).
	SchemeBuilder = runtime.NewSchemeBuilder(func(s *runtime.Scheme) error {
		s.AddKnownTypes(GroupVersion, objectTypes...)
		metav1.AddToGroupVersion(s, GroupVersion)
		return nil
	})

	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme

	// objectTypes are the types of this API, each with its list.
	objectTypes []runtime.Object
)
