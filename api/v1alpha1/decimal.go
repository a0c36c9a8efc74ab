package v1alpha1

import "strconv"

// Decimal is a decimal number written as a string, such as "99.999" or "1.1": the API
// has no floats. Each field of this type states its own range.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=16
// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
type Decimal string

// Float64 is d as a number; false when d is empty (unset) or not a decimal, which the
// schema refuses.
func (d Decimal) Float64() (float64, bool) {
	if d == "" {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(d), 64)
	return v, err == nil
}
