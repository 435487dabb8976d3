package udconn

// Version checks as numaflow-core makes them (numaflow-shared
// server_info.rs): a Python SDK's version is read as PEP 440 (the pep440_rs
// crate), every other SDK's and Numaflow's own as strict Semantic Versioning
// 2.0.0 (the semver crate), and a minimum is compared the way its
// check_constraint does, with "-z" meaning "this release, not its
// pre-releases". Being as strict as Numaflow matters in both directions: a
// version Numaflow cannot parse makes it refuse the container (and never
// nack its source), and one it can parse must get the same answer here.

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// semVersion is a version as the semver crate's Version::parse reads it.
type semVersion struct {
	major, minor, patch uint64
	pre, build          string
}

func (v semVersion) String() string {
	s := fmt.Sprintf("%d.%d.%d", v.major, v.minor, v.patch)
	if v.pre != "" {
		s += "-" + v.pre
	}
	if v.build != "" {
		s += "+" + v.build
	}
	return s
}

// parseSemVersion parses MAJOR.MINOR.PATCH[-PRE][+BUILD] strictly: three
// numbers without leading zeros, dot-separated identifiers of
// [0-9A-Za-z-], no leading zero in a numeric pre-release identifier, no
// whitespace.
func parseSemVersion(s string) (semVersion, error) {
	var v semVersion
	rest := s
	if i := strings.IndexByte(rest, '+'); i >= 0 {
		v.build = rest[i+1:]
		rest = rest[:i]
		if err := checkIdentifiers(v.build, "build metadata", false); err != nil {
			return v, err
		}
	}
	if i := strings.IndexByte(rest, '-'); i >= 0 {
		v.pre = rest[i+1:]
		rest = rest[:i]
		if err := checkIdentifiers(v.pre, "pre-release", true); err != nil {
			return v, err
		}
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 {
		return v, fmt.Errorf("%q is not a semantic version (MAJOR.MINOR.PATCH)", clipString(s))
	}
	nums := [3]*uint64{&v.major, &v.minor, &v.patch}
	for i, p := range parts {
		n, err := parseNumber(p)
		if err != nil {
			return v, fmt.Errorf("%q is not a semantic version: %v", clipString(s), err)
		}
		*nums[i] = n
	}
	return v, nil
}

// parseNumber reads a version number: digits only, no leading zero.
func parseNumber(p string) (uint64, error) {
	if p == "" {
		return 0, errors.New("empty number")
	}
	for _, c := range p {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q is not a number", clipString(p))
		}
	}
	if len(p) > 1 && p[0] == '0' {
		return 0, fmt.Errorf("leading zero in %q", clipString(p))
	}
	n, err := strconv.ParseUint(p, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is too large", clipString(p))
	}
	return n, nil
}

func checkIdentifiers(s, what string, noLeadingZero bool) error {
	for id := range strings.SplitSeq(s, ".") {
		if id == "" {
			return fmt.Errorf("empty %s identifier", what)
		}
		numeric := true
		for _, c := range id {
			switch {
			case c >= '0' && c <= '9':
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '-':
				numeric = false
			default:
				return fmt.Errorf("%q is not allowed in a %s identifier", c, what)
			}
		}
		if noLeadingZero && numeric && len(id) > 1 && id[0] == '0' {
			return fmt.Errorf("leading zero in %s identifier %q", what, clipString(id))
		}
	}
	return nil
}

// comparePre orders pre-release strings as the semver crate does, with no
// pre-release above any: identifier by identifier, numbers numerically
// (by length, then digits: they have no leading zeros, and may be longer
// than a uint64) and below words, words as ASCII text, and a shorter list
// below a longer one it starts.
func comparePre(a, b string) int {
	switch {
	case a == b:
		return 0
	case a == "":
		return 1
	case b == "":
		return -1
	}
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		x, y := as[i], bs[i]
		xn, yn := isDigits(x), isDigits(y)
		switch {
		case xn && yn:
			if len(x) != len(y) {
				return cmpUint(uint64(len(x)), uint64(len(y)))
			}
			if c := strings.Compare(x, y); c != 0 {
				return c
			}
		case xn:
			return -1
		case yn:
			return 1
		default:
			if c := strings.Compare(x, y); c != 0 {
				return c
			}
		}
	}
	return cmpUint(uint64(len(as)), uint64(len(bs)))
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// reqOp is the operator of one comparator of a semver requirement.
type reqOp int

const (
	opExact reqOp = iota
	opGreater
	opGreaterEq
	opLess
	opLessEq
	opTilde
	opCaret
	opWildcard
)

// comparator is one comparator of a requirement ("1.4", ">=1.2.0-rc4",
// "1.x"): minor and patch may be missing, a pre-release only follows a
// patch.
type comparator struct {
	op                  reqOp
	major, minor, patch uint64
	hasMinor, hasPatch  bool
	pre                 string
}

// semReq is a requirement as the semver crate's VersionReq reads it:
// comparators separated by commas, all of which must match; "*" alone
// matches every release.
type semReq struct {
	star bool
	cmps []comparator
}

// maxComparators is the semver crate's bound on comparators per requirement.
const maxComparators = 32

// parseSemReq parses a requirement with the semver crate's grammar: only
// ASCII spaces are skipped, an operator (=, >, >=, <, <=, ~, ^; none is ^),
// MAJOR[.MINOR[.PATCH[-PRE][+BUILD]]], where a missing operator and a
// wildcard (*, x, X) for MINOR or PATCH make a wildcard comparator.
func parseSemReq(text string) (semReq, error) {
	var r semReq
	text = strings.TrimLeft(text, " ")
	if rest, ok := cutWildcard(text); ok {
		if strings.TrimLeft(rest, " ") == "" {
			r.star = true
			return r, nil
		}
		return r, fmt.Errorf("requirement %q: a wildcard must be the only comparator", clipString(text))
	}
	for {
		if len(r.cmps) == maxComparators-1 {
			return r, fmt.Errorf("requirement %q has more than %d comparators", clipString(text), maxComparators-1)
		}
		c, rest, err := parseComparator(text)
		if err != nil {
			return r, fmt.Errorf("requirement %q: %v", clipString(text), err)
		}
		r.cmps = append(r.cmps, c)
		if rest == "" {
			return r, nil
		}
		after, ok := strings.CutPrefix(rest, ",")
		if !ok {
			return r, fmt.Errorf("requirement %q: expected a comma, found %q", clipString(text), rest[:1])
		}
		text = strings.TrimLeft(after, " ")
	}
}

func parseComparator(input string) (comparator, string, error) {
	var c comparator
	text, explicit := input, true
	switch {
	case strings.HasPrefix(text, ">="):
		c.op, text = opGreaterEq, text[2:]
	case strings.HasPrefix(text, "<="):
		c.op, text = opLessEq, text[2:]
	case strings.HasPrefix(text, ">"):
		c.op, text = opGreater, text[1:]
	case strings.HasPrefix(text, "<"):
		c.op, text = opLess, text[1:]
	case strings.HasPrefix(text, "="):
		c.op, text = opExact, text[1:]
	case strings.HasPrefix(text, "~"):
		c.op, text = opTilde, text[1:]
	case strings.HasPrefix(text, "^"):
		c.op, text = opCaret, text[1:]
	default:
		c.op, explicit = opCaret, false
	}
	text = strings.TrimLeft(text, " ")
	var err error
	if c.major, text, err = numericPrefix(text); err != nil {
		return c, "", err
	}
	wildcard := false
	if rest, ok := strings.CutPrefix(text, "."); ok {
		if after, ok := cutWildcard(rest); ok {
			wildcard, text = true, after
			if !explicit {
				c.op = opWildcard
			}
		} else {
			if c.minor, text, err = numericPrefix(rest); err != nil {
				return c, "", err
			}
			c.hasMinor = true
		}
	}
	if rest, ok := strings.CutPrefix(text, "."); ok {
		if after, ok := cutWildcard(rest); ok {
			text = after
			if !explicit {
				c.op = opWildcard
			}
		} else if wildcard {
			return c, "", errors.New("a number after a wildcard")
		} else {
			if c.patch, text, err = numericPrefix(rest); err != nil {
				return c, "", err
			}
			c.hasPatch = true
		}
	}
	if rest, ok := strings.CutPrefix(text, "-"); ok && c.hasPatch {
		c.pre, text = cutIdentifiers(rest)
		if err := checkIdentifiers(c.pre, "pre-release", true); err != nil {
			return c, "", err
		}
	}
	if rest, ok := strings.CutPrefix(text, "+"); ok && c.hasPatch {
		var build string
		build, text = cutIdentifiers(rest)
		if err := checkIdentifiers(build, "build metadata", false); err != nil {
			return c, "", err
		}
	}
	return c, strings.TrimLeft(text, " "), nil
}

// numericPrefix reads the version number text starts with.
func numericPrefix(text string) (uint64, string, error) {
	i := 0
	for i < len(text) && text[i] >= '0' && text[i] <= '9' {
		i++
	}
	if i == 0 {
		if text == "" {
			return 0, "", errors.New("a version number is missing")
		}
		return 0, "", fmt.Errorf("%q where a version number should be", clipString(text[:1]))
	}
	n, err := parseNumber(text[:i])
	return n, text[i:], err
}

func cutWildcard(text string) (string, bool) {
	if text != "" && (text[0] == '*' || text[0] == 'x' || text[0] == 'X') {
		return text[1:], true
	}
	return text, false
}

// cutIdentifiers splits off the dot-separated identifiers text starts with.
func cutIdentifiers(text string) (string, string) {
	i := 0
	for i < len(text) {
		c := text[i]
		if c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '.' {
			i++
			continue
		}
		break
	}
	return text[:i], text[i:]
}

// matches is VersionReq::matches: every comparator matches v, and a
// pre-release v only if some comparator is a pre-release of v's own
// MAJOR.MINOR.PATCH.
func (r semReq) matches(v semVersion) bool {
	for _, c := range r.cmps {
		if !c.matches(v) {
			return false
		}
	}
	if v.pre == "" {
		return true
	}
	for _, c := range r.cmps {
		if c.hasMinor && c.hasPatch && c.pre != "" && c.major == v.major && c.minor == v.minor && c.patch == v.patch {
			return true
		}
	}
	return false
}

func (c comparator) matches(v semVersion) bool {
	switch c.op {
	case opExact, opWildcard:
		return c.exact(v)
	case opGreater:
		return c.greater(v)
	case opGreaterEq:
		return c.exact(v) || c.greater(v)
	case opLess:
		return c.less(v)
	case opLessEq:
		return c.exact(v) || c.less(v)
	case opTilde:
		if v.major != c.major || c.hasMinor && v.minor != c.minor {
			return false
		}
		if c.hasPatch && v.patch != c.patch {
			return v.patch > c.patch
		}
		return comparePre(v.pre, c.pre) >= 0
	}
	return c.caret(v)
}

func (c comparator) exact(v semVersion) bool {
	return v.major == c.major && (!c.hasMinor || v.minor == c.minor) && (!c.hasPatch || v.patch == c.patch) && v.pre == c.pre
}

// greater and less compare v with the comparator's version, its missing
// numbers counting as equal, never as greater or less.
func (c comparator) greater(v semVersion) bool { return c.order(v) > 0 }

func (c comparator) less(v semVersion) bool { return c.order(v) < 0 }

// order is v against c: -1, +1, or 0 when equal or undecided (a missing
// number reached).
func (c comparator) order(v semVersion) int {
	if v.major != c.major {
		return cmpUint(v.major, c.major)
	}
	if !c.hasMinor {
		return 0
	}
	if v.minor != c.minor {
		return cmpUint(v.minor, c.minor)
	}
	if !c.hasPatch {
		return 0
	}
	if v.patch != c.patch {
		return cmpUint(v.patch, c.patch)
	}
	return comparePre(v.pre, c.pre)
}

func (c comparator) caret(v semVersion) bool {
	if v.major != c.major {
		return false
	}
	if !c.hasMinor {
		return true
	}
	if !c.hasPatch {
		if c.major > 0 {
			return v.minor >= c.minor
		}
		return v.minor == c.minor
	}
	switch {
	case c.major > 0:
		if v.minor != c.minor {
			return v.minor > c.minor
		}
		if v.patch != c.patch {
			return v.patch > c.patch
		}
	case c.minor > 0:
		if v.minor != c.minor {
			return false
		}
		if v.patch != c.patch {
			return v.patch > c.patch
		}
	case v.minor != c.minor || v.patch != c.patch:
		return false
	}
	return comparePre(v.pre, c.pre) >= 0
}

// checkConstraint is numaflow-shared's check_constraint(v, constraint):
// a constraint with "-z" ("X.Y.Z-z") is the release X.Y.Z and not its
// pre-releases; with another '-' a pre-release minimum. A version that
// does not start with the constraint's X.Y.Z (as text) is compared by its
// own MAJOR.MINOR.PATCH alone, so a pre-release of a later release is
// newer. Numaflow compares text, so 0.10.20-rc1 does not meet 0.10.2-z;
// neither does it here.
func checkConstraint(v semVersion, constraint string) (bool, error) {
	text := v.String()
	// Numaflow's MAJOR.MINOR.PATCH of v: its text up to the first '-'.
	head, _, _ := strings.Cut(text, "-")
	mmp, err := parseSemVersion(head)
	if err != nil {
		return false, err
	}
	bare := constraint
	for strings.HasPrefix(bare, ">=") {
		bare = bare[2:]
	}
	mmpText, _, _ := strings.Cut(bare, "-")
	switch {
	case strings.Contains(constraint, "-z"):
		if !strings.HasPrefix(text, mmpText) {
			return checkConstraint(mmp, ">="+mmpText)
		}
		return checkConstraint(v, ">="+mmpText)
	case strings.Contains(constraint, "-"):
		if !strings.HasPrefix(text, mmpText) {
			return checkConstraint(mmp, ">="+mmpText)
		}
	}
	r, err := parseSemReq(constraint)
	if err != nil {
		return false, err
	}
	return r.matches(v), nil
}

// pep440Pattern is PEP 440's version grammar (its appendix), as pep440_rs
// and pypa/packaging read it: case-insensitive, surrounding whitespace
// allowed.
var pep440Pattern = regexp.MustCompile(`(?i)^\s*v?` +
	`(?:([0-9]+)!)?` + // epoch
	`([0-9]+(?:\.[0-9]+)*)` + // release
	`(?:[-_.]?(alpha|a|beta|b|preview|pre|c|rc)[-_.]?([0-9]+)?)?` + // pre-release
	`(?:-([0-9]+)|[-_.]?(post|rev|r)[-_.]?([0-9]+)?)?` + // post-release
	`(?:[-_.]?(dev)[-_.]?([0-9]+)?)?` + // development release
	`(?:\+([a-z0-9]+(?:[-_.][a-z0-9]+)*))?` + // local version
	`\s*$`)

// pep440Version is a PEP 440 version reduced to what orders it (a local
// version label never does against a minimum without one).
type pep440Version struct {
	epoch   uint64
	release []uint64
	preRank uint8 // 0 a, 1 b, 2 rc; 3 none
	pre     uint64
	hasPost bool
	post    uint64
	hasDev  bool
	dev     uint64
}

func parsePEP440(s string) (pep440Version, error) {
	m := pep440Pattern.FindStringSubmatch(s)
	if m == nil {
		return pep440Version{}, fmt.Errorf("%q is not a PEP 440 version", clipString(s))
	}
	num := func(d string) (uint64, error) {
		if d == "" {
			return 0, nil
		}
		n, err := strconv.ParseUint(d, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q: %q is too large", clipString(s), clipString(d))
		}
		return n, nil
	}
	var v pep440Version
	var err error
	if v.epoch, err = num(m[1]); err != nil {
		return v, err
	}
	for p := range strings.SplitSeq(m[2], ".") {
		n, err := num(p)
		if err != nil {
			return v, err
		}
		v.release = append(v.release, n)
	}
	v.preRank = 3
	if m[3] != "" {
		switch strings.ToLower(m[3]) {
		case "alpha", "a":
			v.preRank = 0
		case "beta", "b":
			v.preRank = 1
		default: // c, pre, preview, rc
			v.preRank = 2
		}
		if v.pre, err = num(m[4]); err != nil {
			return v, err
		}
	}
	if m[5] != "" || m[6] != "" {
		v.hasPost = true
		if v.post, err = num(m[5] + m[7]); err != nil {
			return v, err
		}
	}
	if m[8] != "" {
		v.hasDev = true
		if v.dev, err = num(m[9]); err != nil {
			return v, err
		}
	}
	return v, nil
}

// pep440Key is what orders versions of one release, as pep440_rs's
// sortable tuple: a .devN of the release itself first, then aN, bN, rcN
// (each with its own post and dev releases), the release, its
// post-releases; no post-release below any, no dev release above any.
type pep440Key struct {
	rank    uint8
	pre     uint64
	hasPost bool
	post    uint64
	dev     uint64
}

func (v pep440Version) key() pep440Key {
	dev := uint64(math.MaxUint64)
	if v.hasDev {
		dev = v.dev
	}
	switch {
	case v.preRank == 3 && !v.hasPost && v.hasDev:
		return pep440Key{rank: 0, dev: v.dev}
	case v.preRank < 3:
		return pep440Key{rank: v.preRank + 1, pre: v.pre, hasPost: v.hasPost, post: v.post, dev: dev}
	case !v.hasPost:
		return pep440Key{rank: 4}
	}
	return pep440Key{rank: 5, hasPost: true, post: v.post, dev: dev}
}

// comparePEP440 orders two versions as PEP 440 does: epoch, release
// (shorter padded with zeros), then the key of their suffixes.
func comparePEP440(a, b pep440Version) int {
	if c := cmpUint(a.epoch, b.epoch); c != 0 {
		return c
	}
	for i := 0; i < len(a.release) || i < len(b.release); i++ {
		var x, y uint64
		if i < len(a.release) {
			x = a.release[i]
		}
		if i < len(b.release) {
			y = b.release[i]
		}
		if c := cmpUint(x, y); c != 0 {
			return c
		}
	}
	ka, kb := a.key(), b.key()
	if c := cmpUint(uint64(ka.rank), uint64(kb.rank)); c != 0 {
		return c
	}
	if c := cmpUint(ka.pre, kb.pre); c != 0 {
		return c
	}
	if ka.hasPost != kb.hasPost {
		if ka.hasPost {
			return 1
		}
		return -1
	}
	if c := cmpUint(ka.post, kb.post); c != 0 {
		return c
	}
	return cmpUint(ka.dev, kb.dev)
}

// sdkAtLeast reports whether an SDK version meets a minimum in Numaflow's
// notation, read as numaflow-shared reads it for the language: PEP 440 for
// Python, strict semver after any leading 'v's for the others. An error
// means Numaflow could not parse the version.
func sdkAtLeast(version, minimum, lang string) (bool, error) {
	if lang == "python" {
		v, err := parsePEP440(version)
		if err != nil {
			return false, err
		}
		m, err := parsePEP440(minimum)
		if err != nil {
			return false, fmt.Errorf("minimum %s: %w", minimum, err)
		}
		return comparePEP440(v, m) >= 0, nil
	}
	v, err := parseSemVersion(strings.TrimLeft(version, "v"))
	if err != nil {
		return false, err
	}
	return checkConstraint(v, ">="+minimum)
}

// numaflowAtLeast reports whether Numaflow release have (strict semver)
// meets a container's minimum_numaflow_version, as numaflow-shared's
// check_controller_compatibility decides it.
func numaflowAtLeast(have, minimum string) (bool, error) {
	v, err := parseSemVersion(strings.TrimLeft(have, "v"))
	if err != nil {
		return false, err
	}
	return checkConstraint(v, ">="+minimum)
}
