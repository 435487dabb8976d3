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

// comparePre orders pre-release strings as Semantic Versioning does, with
// no pre-release above any: identifier by identifier, numbers numerically
// and below words, a shorter list below a longer one it starts.
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
		x, xerr := strconv.ParseUint(as[i], 10, 64)
		y, yerr := strconv.ParseUint(bs[i], 10, 64)
		switch {
		case xerr == nil && yerr == nil:
			if x != y {
				return cmpUint(x, y)
			}
		case xerr == nil:
			return -1
		case yerr == nil:
			return 1
		default:
			if c := strings.Compare(as[i], bs[i]); c != 0 {
				return c
			}
		}
	}
	return cmpUint(uint64(len(as)), uint64(len(bs)))
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

// minimumReq is a ">=" requirement as the semver crate's VersionReq reads
// it: minor and patch may be missing (">=1.4" is ">=1.4.0"), a
// pre-release only after a patch, build metadata ignored.
type minimumReq struct {
	major, minor, patch uint64
	hasMinor, hasPatch  bool
	pre                 string
}

func parseMinimumReq(constraint string) (minimumReq, error) {
	var r minimumReq
	s, ok := strings.CutPrefix(strings.TrimSpace(constraint), ">=")
	if !ok {
		return r, fmt.Errorf("%q is not a minimum (>=VERSION)", clipString(constraint))
	}
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '+'); i >= 0 {
		if err := checkIdentifiers(s[i+1:], "build metadata", false); err != nil {
			return r, err
		}
		s = s[:i]
	}
	core, pre, hasPre := strings.Cut(s, "-")
	parts := strings.Split(core, ".")
	if len(parts) > 3 {
		return r, fmt.Errorf("%q has more than three version numbers", clipString(constraint))
	}
	nums := [3]*uint64{&r.major, &r.minor, &r.patch}
	for i, p := range parts {
		n, err := parseNumber(p)
		if err != nil {
			return r, fmt.Errorf("minimum %q: %v", clipString(constraint), err)
		}
		*nums[i] = n
	}
	r.hasMinor, r.hasPatch = len(parts) > 1, len(parts) > 2
	if hasPre {
		if !r.hasPatch {
			return r, fmt.Errorf("minimum %q: a pre-release needs a patch number", clipString(constraint))
		}
		if err := checkIdentifiers(pre, "pre-release", true); err != nil {
			return r, err
		}
		r.pre = pre
	}
	return r, nil
}

// matches is VersionReq::matches for one ">=" comparator: v is at least
// the minimum, and a pre-release v only matches a minimum that is a
// pre-release of the same MAJOR.MINOR.PATCH.
func (r minimumReq) matches(v semVersion) bool {
	if !r.atMost(v) {
		return false
	}
	if v.pre == "" {
		return true
	}
	return r.hasPatch && r.pre != "" && r.major == v.major && r.minor == v.minor && r.patch == v.patch
}

// atMost reports whether the minimum is at or below v, ignoring the rule
// for pre-release versions.
func (r minimumReq) atMost(v semVersion) bool {
	if v.major != r.major {
		return v.major > r.major
	}
	if !r.hasMinor {
		return true
	}
	if v.minor != r.minor {
		return v.minor > r.minor
	}
	if !r.hasPatch {
		return true
	}
	if v.patch != r.patch {
		return v.patch > r.patch
	}
	return comparePre(v.pre, r.pre) >= 0
}

// semverAtLeast reports whether v satisfies the minimum in Numaflow's
// notation, as numaflow-shared's check_constraint(v, ">="+minimum) does:
// "X.Y.Z-z" is the release X.Y.Z and not its pre-releases; a version that
// does not start with the minimum's X.Y.Z (as text) is compared by its own
// MAJOR.MINOR.PATCH alone, so a pre-release of a later release is newer.
// Numaflow compares text, so 0.10.20-rc1 does not meet 0.10.2-z; neither
// does it here.
func semverAtLeast(v semVersion, minimum string) (bool, error) {
	text := v.String()
	// Numaflow's MAJOR.MINOR.PATCH of v: its text up to the first '-'.
	head, _, _ := strings.Cut(text, "-")
	mmp, err := parseSemVersion(head)
	if err != nil {
		return false, err
	}
	minMMP, _, _ := strings.Cut(minimum, "-")
	switch {
	case strings.Contains(minimum, "-z"):
		if !strings.HasPrefix(text, minMMP) {
			return semverAtLeast(mmp, minMMP)
		}
		return semverAtLeast(v, minMMP)
	case strings.Contains(minimum, "-"):
		if !strings.HasPrefix(text, minMMP) {
			return semverAtLeast(mmp, minMMP)
		}
	}
	r, err := parseMinimumReq(">=" + minimum)
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
	preRank int // 0 a, 1 b, 2 rc, 3 none
	pre     uint64
	post    int64 // -1: none
	dev     int64 // -1: none
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
	v.post = -1
	if m[5] != "" || m[6] != "" {
		n, err := num(m[5] + m[7])
		if err != nil {
			return v, err
		}
		v.post = int64(n & (1<<63 - 1))
	}
	v.dev = -1
	if m[8] != "" {
		n, err := num(m[9])
		if err != nil {
			return v, err
		}
		v.dev = int64(n & (1<<63 - 1))
	}
	return v, nil
}

// comparePEP440 orders two versions as PEP 440 does: epoch, release
// (shorter padded with zeros), then .devN < aN < bN < rcN < release <
// .postN, where a .devN of a pre- or post-release sorts just before it.
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
	key := func(v pep440Version) [4]int64 {
		rank := int64(v.preRank) + 1
		if v.preRank == 3 && v.post < 0 && v.dev >= 0 {
			rank = 0 // a development release of the release itself
		}
		dev := v.dev
		if dev < 0 {
			dev = 1<<63 - 1
		}
		return [4]int64{rank, int64(v.pre & (1<<63 - 1)), v.post, dev}
	}
	ka, kb := key(a), key(b)
	for i := range ka {
		if ka[i] != kb[i] {
			if ka[i] < kb[i] {
				return -1
			}
			return 1
		}
	}
	return 0
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
	return semverAtLeast(v, minimum)
}

// numaflowAtLeast reports whether Numaflow release have (strict semver)
// meets a container's minimum_numaflow_version, as numaflow-shared's
// check_controller_compatibility decides it.
func numaflowAtLeast(have, minimum string) (bool, error) {
	v, err := parseSemVersion(strings.TrimLeft(have, "v"))
	if err != nil {
		return false, err
	}
	return semverAtLeast(v, minimum)
}
