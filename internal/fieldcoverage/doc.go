/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

// Package fieldcoverage holds only a test: every field the generated CRD schemas of
// VirtualMachineInstance and VirtualMachine accept must either be refused by the validating
// webhook or change what qvirt runs (the launcher pod, the launcher's VM spec or QEMU's command
// line), unless a written reason says what else acts on it. It keeps a manifest from starting a
// VM that silently lacks what it asked for.
package fieldcoverage
