//go:build race

package faults_test

// raceBuild is set when the tests, and so the programs they build, run
// with the race detector, which multiplies memory use.
const raceBuild = true
