//go:build !linux

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

package monoclock

import "time"

var epoch = time.Now()

// Now returns a monotonic reading in nanoseconds.
func Now() int64 { return int64(time.Since(epoch)) }

// SleepUntil sleeps until monoNow reaches atNs, or for at most max.
func SleepUntil(atNs int64, max time.Duration) {
	time.Sleep(min(time.Duration(atNs-Now()), max))
}
