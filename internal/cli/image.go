package cli

import "strings"

// ImageTag is the tag of an image reference (before a digest), or the reference when it
// has none: the version kubectl isochron version reports of the manager's image.
func ImageTag(image string) string {
	ref, _, _ := strings.Cut(image, "@")
	if colon := strings.LastIndex(ref, ":"); colon > strings.LastIndex(ref, "/") {
		return ref[colon+1:]
	}
	return image
}
