// Package buildinfo says which build of outboxrelay is running: its
// version, the commit it was built from and the Go toolchain that built it,
// as the Go linker recorded them (runtime/debug.ReadBuildInfo). A version
// set at link time with -ldflags -X takes precedence over the recorded
// module version, so release builds and images name their release. What is
// not recorded (a build outside a Git checkout, -buildvcs=false) is
// reported as unknown rather than guessed.
package buildinfo
