package runner

import (
	"fmt"
	"slices"
	"strings"
)

// TagCondition is one of Numaflow's tag conditions (spec.bypass.<sink>.tags
// of a MonoVertex): the operator and the tag values it compares a
// message's tags with.
type TagCondition struct {
	// Operator is "or" (any value present, the default), "and" (every value
	// present) or "not" (none present).
	Operator string
	// Values are the tags to look for.
	Values []string
}

// ParseTagCondition reads a condition written as "operator:tag,tag" (the
// operator and its colon may be left out for "or"), the form the
// MV_BYPASS_* variables take.
func ParseTagCondition(s string) (*TagCondition, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	c := &TagCondition{Operator: "or"}
	if op, rest, ok := strings.Cut(s, ":"); ok {
		c.Operator = strings.TrimSpace(op)
		s = rest
	}
	switch c.Operator {
	case "or", "and", "not":
	default:
		return nil, fmt.Errorf("operator %q: must be or, and or not", c.Operator)
	}
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			c.Values = append(c.Values, v)
		}
	}
	if len(c.Values) == 0 {
		return nil, fmt.Errorf("no tags: write operator:tag,tag such as or:invalid,late")
	}
	return c, nil
}

// Match reports whether tags satisfy the condition, exactly as Numaflow's
// should_forward decides it: a nil condition never matches (there is no
// bypass), a condition without values matches everything, and a message
// without tags is checked as one with an empty tag list.
func (c *TagCondition) Match(tags []string) bool {
	if c == nil {
		return false
	}
	if len(c.Values) == 0 {
		return true
	}
	switch c.Operator {
	case "and":
		for _, v := range c.Values {
			if !slices.Contains(tags, v) {
				return false
			}
		}
		return true
	case "or", "":
		for _, v := range c.Values {
			if slices.Contains(tags, v) {
				return true
			}
		}
		return false
	case "not":
		for _, v := range c.Values {
			if slices.Contains(tags, v) {
				return false
			}
		}
		return true
	}
	return false
}

// String writes the condition the way ParseTagCondition reads it.
func (c *TagCondition) String() string {
	if c == nil {
		return ""
	}
	return c.Operator + ":" + strings.Join(c.Values, ",")
}

// Bypass holds the bypass conditions of the three sinks (Numaflow's
// spec.bypass): an output whose tags match one leaves the chain of stages
// at once and goes straight to that sink. They are checked as messages
// leave the source (after its transformer) and as they leave each map
// UDF, in the order sink, fallback, onSuccess; the first match wins.
type Bypass struct {
	Sink, Fallback, OnSuccess *TagCondition
}

func (b *Bypass) empty() bool {
	return b.Sink == nil && b.Fallback == nil && b.OnSuccess == nil
}
