// Package launcherpod renders the Pod that runs virt-launcher for a VMI. The
// rendering is a pure function of the VMI and Options so that it can be tested
// without an API server and so that a restarted controller renders the same
// Pod (same name) as before.
package launcherpod
