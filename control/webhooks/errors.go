/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The constructors below keep the whole KubeVirt-style message in Detail: it
// becomes the cause message of the 422 verbatim, while Type becomes its reason.

func invalid(p *field.Path, value any, format string, args ...any) *field.Error {
	return &field.Error{Type: field.ErrorTypeInvalid, Field: p.String(), BadValue: value, Detail: fmt.Sprintf(format, args...)}
}

func required(p *field.Path, format string, args ...any) *field.Error {
	return &field.Error{Type: field.ErrorTypeRequired, Field: p.String(), Detail: fmt.Sprintf(format, args...)}
}

func notSupported(p *field.Path, value any, format string, args ...any) *field.Error {
	return &field.Error{Type: field.ErrorTypeNotSupported, Field: p.String(), BadValue: value, Detail: fmt.Sprintf(format, args...)}
}

func duplicate(p *field.Path, value any, format string, args ...any) *field.Error {
	return &field.Error{Type: field.ErrorTypeDuplicate, Field: p.String(), BadValue: value, Detail: fmt.Sprintf(format, args...)}
}

func forbidden(p *field.Path, format string, args ...any) *field.Error {
	return &field.Error{Type: field.ErrorTypeForbidden, Field: p.String(), Detail: fmt.Sprintf(format, args...)}
}

func tooMany(p *field.Path, got int, format string, args ...any) *field.Error {
	return &field.Error{Type: field.ErrorTypeTooMany, Field: p.String(), BadValue: got, Detail: fmt.Sprintf(format, args...)}
}

// unsupported refuses a feature the API has but qvirt does not run.
func unsupported(p *field.Path, what string) *field.Error {
	return &field.Error{Type: field.ErrorTypeNotSupported, Field: p.String(), Detail: "qvirt does not support " + what}
}
