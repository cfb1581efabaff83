package docker

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// repoRoot is the repository, seen from this package.
const repoRoot = ".."

// goreleaserConfig is the part of .goreleaser.yaml these tests read.
type goreleaserConfig struct {
	Builds []struct {
		ID      string   `yaml:"id"`
		Env     []string `yaml:"env"`
		Goos    []string `yaml:"goos"`
		Goarch  []string `yaml:"goarch"`
		Ldflags []string `yaml:"ldflags"`
	} `yaml:"builds"`
	Checksum struct {
		NameTemplate string `yaml:"name_template"`
	} `yaml:"checksum"`
	SBOMs []struct {
		Artifacts string `yaml:"artifacts"`
	} `yaml:"sboms"`
	Dockers []struct {
		IDs        []string `yaml:"ids"`
		Dockerfile string   `yaml:"dockerfile"`
		Images     []string `yaml:"images"`
		Platforms  []string `yaml:"platforms"`
		SBOM       string   `yaml:"sbom"`
	} `yaml:"dockers_v2"`
}

func readYAML(t *testing.T, path string, out any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, out); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestReleaseConfig checks that the release builds what the other
// artefacts expect: static binaries for Linux and macOS with the version
// stamped by the -X docker/Dockerfile sets, archives with checksums and
// SBOMs, and a multi-arch image named as the chart's image, from a
// Dockerfile whose image is docker/Dockerfile's; and that the release
// workflow runs the goreleaser scripts/test checks this with.
func TestReleaseConfig(t *testing.T) {
	var cfg goreleaserConfig
	readYAML(t, filepath.Join(repoRoot, ".goreleaser.yaml"), &cfg)
	if len(cfg.Builds) != 1 {
		t.Fatalf(".goreleaser.yaml has %d builds, want the relay's", len(cfg.Builds))
	}
	b := cfg.Builds[0]
	if !slices.Contains(b.Env, "CGO_ENABLED=0") {
		t.Errorf("build env %v: without CGO_ENABLED=0 the binary is not static", b.Env)
	}
	if g, a := slices.Sorted(slices.Values(b.Goos)), slices.Sorted(slices.Values(b.Goarch)); !slices.Equal(g, []string{"darwin", "linux"}) || !slices.Equal(a, []string{"amd64", "arm64"}) {
		t.Errorf("builds for %v × %v, want linux and darwin × amd64 and arm64", g, a)
	}
	dockerfile, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`-X (\S+)=`).FindSubmatch(dockerfile)
	if m == nil {
		t.Fatal("docker/Dockerfile sets no -X variable")
	}
	if !strings.Contains(strings.Join(b.Ldflags, " "), "-X "+string(m[1])+"=") {
		t.Errorf("ldflags %q do not set %s, as docker/Dockerfile does", b.Ldflags, m[1])
	}
	if cfg.Checksum.NameTemplate == "" || len(cfg.SBOMs) == 0 {
		t.Errorf("checksum %+v, sboms %+v: want both", cfg.Checksum, cfg.SBOMs)
	}

	if len(cfg.Dockers) != 1 {
		t.Fatalf(".goreleaser.yaml has %d dockers_v2, want one image", len(cfg.Dockers))
	}
	d := cfg.Dockers[0]
	if !slices.Equal(d.IDs, []string{b.ID}) || !slices.Equal(slices.Sorted(slices.Values(d.Platforms)), []string{"linux/amd64", "linux/arm64"}) || d.SBOM != "true" {
		t.Errorf("the image is built from builds %v for %v (sbom %q); want build %q for linux/amd64 and linux/arm64, with an SBOM", d.IDs, d.Platforms, d.SBOM, b.ID)
	}
	if rel, ok := strings.CutPrefix(d.Dockerfile, "docker/"); !ok {
		t.Errorf("the image's Dockerfile %q is not in docker/", d.Dockerfile)
	} else {
		checkSameImage(t, "Dockerfile", rel)
	}
	var values struct {
		Image struct {
			Repository string `yaml:"repository"`
		} `yaml:"image"`
	}
	readYAML(t, filepath.Join(repoRoot, "deploy/helm/outboxrelay/values.yaml"), &values)
	if !slices.Equal(d.Images, []string{values.Image.Repository}) {
		t.Errorf("the release publishes images %v; the chart runs %q", d.Images, values.Image.Repository)
	}

	script, err := os.ReadFile(filepath.Join(repoRoot, "scripts/test"))
	if err != nil {
		t.Fatal(err)
	}
	pin := regexp.MustCompile(`(?m)^goreleaser_version=(\S+)$`).FindSubmatch(script)
	if pin == nil {
		t.Fatal("scripts/test pins no goreleaser_version")
	}
	if got := workflowGoreleaser(t); got != string(pin[1]) {
		t.Errorf(".github/workflows/release.yml runs goreleaser %q; scripts/test checks the configuration with %s", got, pin[1])
	}
}

// checkSameImage checks that two Dockerfiles' final stages make the same
// image: the same base, labels, user, entrypoint, command and port.
func checkSameImage(t *testing.T, a, b string) {
	t.Helper()
	sa, sb := finalStage(t, a), finalStage(t, b)
	for _, name := range []string{"FROM", "LABEL", "USER", "ENTRYPOINT", "CMD", "EXPOSE"} {
		if x, y := instruction(sa, name), instruction(sb, name); x == "" || x != y {
			t.Errorf("%s: %s has %q, %s %q", name, a, x, b, y)
		}
	}
}

// workflowGoreleaser is the goreleaser version the release workflow runs.
func workflowGoreleaser(t *testing.T) string {
	t.Helper()
	var wf struct {
		Jobs map[string]struct {
			Steps []struct {
				Uses string            `yaml:"uses"`
				With map[string]string `yaml:"with"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	readYAML(t, filepath.Join(repoRoot, ".github/workflows/release.yml"), &wf)
	for _, j := range wf.Jobs {
		for _, s := range j.Steps {
			if strings.HasPrefix(s.Uses, "goreleaser/goreleaser-action@") {
				return s.With["version"]
			}
		}
	}
	t.Fatal(".github/workflows/release.yml has no goreleaser/goreleaser-action step")
	return ""
}

// goreleaserBin is the goreleaser on PATH, or skips the test.
func goreleaserBin(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("goreleaser")
	if err != nil {
		t.Skip("goreleaser is not on PATH, so the release configuration is not checked here: OUTBOXRELAY_TEST_TOOLS=build scripts/test builds " +
			"goreleaser v2.15.1 (go install github.com/goreleaser/goreleaser/v2@v2.15.1) into its tool cache")
	}
	return bin
}

// run runs name with args in dir, failing the test with its output if it
// fails.
func run(t *testing.T, ctx context.Context, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return string(out)
}

// TestGoreleaserCheck is goreleaser's own check of .goreleaser.yaml: it
// fails on an invalid or a deprecated setting.
func TestGoreleaserCheck(t *testing.T) {
	bin := goreleaserBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run(t, ctx, repoRoot, os.Environ(), bin, "check")
}

// TestReleaseSnapshot builds the release's binary for this machine with
// goreleaser, as the release workflow would but as a snapshot, from a
// fresh repository holding the working tree's files (Go records no
// revision in a git worktree, and the build must not depend on how the
// checkout was made), tagged v1.2.3. The binary must be static, and its
// `version` must print the snapshot's version and the commit, unmodified.
func TestReleaseSnapshot(t *testing.T) {
	bin := goreleaserBin(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed, and goreleaser needs it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	repo := snapshotRepo(t, ctx)
	commit := strings.TrimSpace(run(t, ctx, repo, os.Environ(), "git", "rev-parse", "HEAD"))
	commitTime, err := time.Parse(time.RFC3339, strings.TrimSpace(run(t, ctx, repo, os.Environ(), "git", "log", "-1", "--format=%cI")))
	if err != nil {
		t.Fatal(err)
	}

	run(t, ctx, repo, os.Environ(), bin, "build", "--snapshot", "--clean", "--single-target")
	var meta struct {
		Version string `json:"version"`
		Commit  string `json:"commit"`
	}
	readJSON(t, filepath.Join(repo, "dist/metadata.json"), &meta)
	if meta.Commit != commit || !strings.HasPrefix(meta.Version, "1.2.4-snapshot+") {
		t.Errorf("goreleaser built version %q of commit %q; want 1.2.4-snapshot+... (after the tag v1.2.3) of %s", meta.Version, meta.Commit, commit)
	}
	binary := builtBinary(t, repo)
	if runtime.GOOS == "linux" {
		checkStatic(t, binary)
	}

	out := run(t, ctx, repo, os.Environ(), binary, "version")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if want := "outboxrelay v" + meta.Version; lines[0] != want {
		t.Errorf("outboxrelay version printed %q first, want %q", lines[0], want)
	}
	field := func(name string) string {
		for _, l := range lines {
			if v, ok := strings.CutPrefix(l, name+":"); ok {
				return strings.TrimSpace(v)
			}
		}
		return ""
	}
	if got := field("revision"); got != commit {
		t.Errorf("outboxrelay version says revision %q, want the commit %s, unmodified:\n%s", got, commit, out)
	}
	if got, err := time.Parse(time.RFC3339, field("time")); err != nil || !got.Equal(commitTime) {
		t.Errorf("outboxrelay version says time %q, want the commit's, %s", field("time"), commitTime)
	}
	t.Logf("%s", out)
}

// snapshotRepo makes a git repository of the working tree's files (those
// git tracks or would, none it ignores), one commit tagged v1.2.3, with
// the remote a clone of the project has.
func snapshotRepo(t *testing.T, ctx context.Context) string {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	repo := t.TempDir()
	files := run(t, ctx, root, os.Environ(), "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	for name := range strings.SplitSeq(strings.TrimSuffix(files, "\x00"), "\x00") {
		if err := copyFile(filepath.Join(root, name), filepath.Join(repo, name)); err != nil {
			t.Fatal(err)
		}
	}
	// No user's configuration (signing, hooks, templates) applies.
	env := append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@example.invalid",
		"GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@example.invalid")
	for _, args := range [][]string{
		{"init", "--quiet", "--initial-branch=main"},
		{"add", "--all"},
		{"commit", "--quiet", "--message", "snapshot of the working tree"},
		{"tag", "v1.2.3"},
		{"remote", "add", "origin", "https://github.com/outboxrelay/outboxrelay.git"},
	} {
		run(t, ctx, repo, env, "git", args...)
	}
	return repo
}

// copyFile copies src to dst with its mode; a file deleted from the
// working tree but still tracked is left out, as a commit would.
func copyFile(src, dst string) error {
	fi, err := os.Lstat(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, fi.Mode().Perm())
}

func readJSON(t *testing.T, path string, out any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// builtBinary is the one binary goreleaser lists in dist/artifacts.json.
func builtBinary(t *testing.T, repo string) string {
	t.Helper()
	var artifacts []struct {
		Path string `json:"path"`
		Type string `json:"type"`
	}
	readJSON(t, filepath.Join(repo, "dist/artifacts.json"), &artifacts)
	var bins []string
	for _, a := range artifacts {
		if a.Type == "Binary" {
			bins = append(bins, a.Path)
		}
	}
	if len(bins) != 1 {
		t.Fatalf("goreleaser built binaries %v, want one for this machine", bins)
	}
	if filepath.IsAbs(bins[0]) {
		return bins[0]
	}
	return filepath.Join(repo, bins[0])
}

// checkStatic checks that an ELF binary needs no dynamic loader and no
// shared library, as the distroless static image has none.
func checkStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s asks for a dynamic loader: not a static binary", path)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("%s links %v (%v): not a static binary", path, libs, err)
	}
}
