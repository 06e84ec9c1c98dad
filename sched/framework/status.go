package framework

import (
	"errors"
	"strings"
)

// Code says what a plugin's answer means for the pod.
type Code int

// Codes, as in kube-scheduler: the two unschedulable codes differ in whether preemption could help.
const (
	// Success: the pod fits (a nil *Status means Success too).
	Success Code = iota
	// Unschedulable: the pod does not fit now; removing other pods (preemption) could help.
	Unschedulable
	// UnschedulableAndUnresolvable: the pod does not fit and removing pods would not help.
	UnschedulableAndUnresolvable
	// Skip (PreFilter only): the plugin has nothing to check for this pod; its Filter is skipped.
	Skip
	// Error: an internal error; the pod is retried with back-off, no decision is published.
	Error
)

func (c Code) String() string {
	switch c {
	case Success:
		return "Success"
	case Unschedulable:
		return "Unschedulable"
	case UnschedulableAndUnresolvable:
		return "UnschedulableAndUnresolvable"
	case Skip:
		return "Skip"
	case Error:
		return "Error"
	}
	return "Unknown"
}

// Status is a plugin's answer. Statuses are immutable once made, so plugins keep their constant
// rejections in package variables and return them without allocating.
type Status struct {
	code    Code
	reasons []string
	err     error
}

// NewStatus makes a status with reasons (constant strings, shown to the user and counted per node).
func NewStatus(code Code, reasons ...string) *Status {
	return &Status{code: code, reasons: reasons}
}

// AsStatus wraps an internal error.
func AsStatus(err error) *Status {
	if err == nil {
		return nil
	}
	return &Status{code: Error, reasons: []string{err.Error()}, err: err}
}

// Code of the status; Success for nil.
func (s *Status) Code() Code {
	if s == nil {
		return Success
	}
	return s.code
}

// IsSuccess reports whether the status is nil or Success.
func (s *Status) IsSuccess() bool { return s.Code() == Success }

// IsRejected reports whether the pod does not fit (either unschedulable code).
func (s *Status) IsRejected() bool {
	c := s.Code()
	return c == Unschedulable || c == UnschedulableAndUnresolvable
}

// Reasons returns the reasons; callers must not modify the slice.
func (s *Status) Reasons() []string {
	if s == nil {
		return nil
	}
	return s.reasons
}

// Message joins the reasons.
func (s *Status) Message() string {
	if s == nil {
		return ""
	}
	return strings.Join(s.reasons, ", ")
}

// AsError returns the status as an error: nil unless the code is Error.
func (s *Status) AsError() error {
	if s.Code() != Error {
		return nil
	}
	if s.err != nil {
		return s.err
	}
	return errors.New(s.Message())
}
