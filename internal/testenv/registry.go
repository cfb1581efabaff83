package testenv

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Registry is a Schema Registry for tests: the subset of Confluent's REST
// API that franz-go's sr client uses to register, look up and fetch
// schemas, answering with Confluent's response shapes and error codes
// (io.confluent.kafka.schemaregistry.rest.exceptions.Errors): 40401
// subject not found, 40402 version not found, 40403 schema not found,
// 40408 no subject-level compatibility, 409 incompatible (error_code 409),
// 42201 invalid schema, 401 unauthorized. Its endpoints: POST
// /subjects/{s}/versions (register; one id per distinct schema text),
// POST /subjects/{s} (look up), GET /subjects/{s}/versions/{v|latest},
// GET /schemas/ids/{id}, GET /subjects, GET /config[/{s}] (with
// defaultToGlobal). Schemas are Avro, JSON Schema or Protobuf
// (schemaType AVRO, the default, JSON or PROTOBUF); an Avro or JSON schema
// must be JSON, and the schemaType goes back in every answer that carries
// the schema, left out for Avro as Confluent leaves it out. It checks no
// compatibility itself: Reject makes a
// subject refuse every new schema as incompatible. Stop and Start take it
// off the network and back on the same address, keeping what it stores.
type Registry struct {
	// URL is the registry's base URL, the same across Stop and Start.
	URL  string
	addr string

	mu       sync.Mutex
	srv      *http.Server
	done     chan struct{}
	user     string
	password string
	schemas  []string          // by id - 1; one id per distinct schema text and type, as Confluent's
	types    []string          // each schema's schemaType, by id - 1; "" for Avro
	subjects map[string][]int  // subject -> the id of each version, oldest first
	reject   map[string]string // subject -> the incompatibility it reports
	requests map[string]int    // "METHOD path" -> count
	compat   string            // the global compatibility level
	// subjectCompat are the subjects' own levels.
	subjectCompat map[string]string
}

// StartRegistry starts a registry on a free local port, stopped by
// t.Cleanup. With user set, every request must authenticate with HTTP basic
// auth as user and password.
func StartRegistry(t testing.TB, user, password string) *Registry {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: registry listen: %v", err)
	}
	r := &Registry{addr: ln.Addr().String(), user: user, password: password, compat: "BACKWARD",
		subjects: map[string][]int{}, reject: map[string]string{}, requests: map[string]int{}, subjectCompat: map[string]string{}}
	r.URL = "http://" + r.addr
	r.serve(ln)
	t.Cleanup(r.Stop)
	return r
}

func (r *Registry) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(r.handle)}
	done := make(chan struct{})
	r.mu.Lock()
	r.srv, r.done = srv, done
	r.mu.Unlock()
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
}

// Stop closes the listener and every connection: requests fail as when
// the registry is down. Stopping a stopped registry does nothing.
func (r *Registry) Stop() {
	r.mu.Lock()
	srv, done := r.srv, r.done
	r.srv = nil
	r.mu.Unlock()
	if srv == nil {
		return
	}
	_ = srv.Close()
	<-done
}

// Start serves again on the same address after Stop.
func (r *Registry) Start(t testing.TB) {
	t.Helper()
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		t.Fatalf("testenv: registry listen again on %s: %v", r.addr, err)
	}
	r.serve(ln)
}

// Reject makes subject refuse every schema it does not hold yet with a
// 409, as a registry whose compatibility check fails.
func (r *Registry) Reject(subject, details string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reject[subject] = details
}

// Subjects returns the subjects and, for each, the schema text of every
// version, oldest first.
func (r *Registry) Subjects() map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]string{}
	for s, ids := range r.subjects {
		for _, id := range ids {
			out[s] = append(out[s], r.schemas[id-1])
		}
	}
	return out
}

// SchemaType returns the schemaType schema id was registered with: "AVRO",
// "JSON" or "PROTOBUF".
func (r *Registry) SchemaType(id int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id < 1 || id > len(r.types) || r.types[id-1] == "" {
		return "AVRO"
	}
	return r.types[id-1]
}

// Schema returns the text of schema id, and whether there is one.
func (r *Registry) Schema(id int) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id < 1 || id > len(r.schemas) {
		return "", false
	}
	return r.schemas[id-1], true
}

// Requests counts the requests that reached the registry for method and
// path prefix (e.g. "POST /subjects/").
func (r *Registry) Requests(method, prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for k, c := range r.requests {
		if strings.HasPrefix(k, method+" "+prefix) {
			n += c
		}
	}
	return n
}

// apiError is Confluent's error body: {"error_code":..., "message":...}.
type apiError struct {
	status int
	Code   int    `json:"error_code"`
	Msg    string `json:"message"`
}

func (e *apiError) Error() string { return e.Msg }

func (r *Registry) handle(w http.ResponseWriter, req *http.Request) {
	body, err := r.route(req)
	w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	var ae *apiError
	if errors.As(err, &ae) {
		w.WriteHeader(ae.status)
		_ = json.NewEncoder(w).Encode(ae)
		return
	}
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		_ = json.NewEncoder(w).Encode(apiError{Code: 50001, Msg: err.Error()})
		return
	}
	_ = json.NewEncoder(w).Encode(body)
}

type schemaBody struct {
	Schema     string `json:"schema"`
	SchemaType string `json:"schemaType,omitempty"`
}

type subjectSchema struct {
	Subject    string `json:"subject"`
	ID         int    `json:"id"`
	Version    int    `json:"version"`
	SchemaType string `json:"schemaType,omitempty"`
	Schema     string `json:"schema"`
}

func (r *Registry) route(req *http.Request) (any, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	path := strings.TrimSuffix(req.URL.EscapedPath(), "/")
	r.requests[req.Method+" "+path]++
	if r.user != "" {
		if u, p, ok := req.BasicAuth(); !ok || u != r.user || p != r.password {
			return nil, &apiError{http.StatusUnauthorized, 401, "Unauthorized"}
		}
	}
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for i := range parts {
		if p, err := url.PathUnescape(parts[i]); err == nil {
			parts[i] = p
		}
	}
	switch {
	case req.Method == http.MethodGet && len(parts) == 1 && parts[0] == "subjects":
		out := []string{}
		for s := range r.subjects {
			out = append(out, s)
		}
		slices.Sort(out)
		return out, nil
	case req.Method == http.MethodPost && len(parts) == 3 && parts[0] == "subjects" && parts[2] == "versions":
		return r.register(req, parts[1])
	case req.Method == http.MethodPost && len(parts) == 2 && parts[0] == "subjects":
		return r.lookup(req, parts[1])
	case req.Method == http.MethodGet && len(parts) == 4 && parts[0] == "subjects" && parts[2] == "versions":
		return r.version(parts[1], parts[3])
	case req.Method == http.MethodGet && len(parts) == 3 && parts[0] == "schemas" && parts[1] == "ids":
		id, _ := strconv.Atoi(parts[2])
		if id < 1 || id > len(r.schemas) {
			return nil, &apiError{http.StatusNotFound, 40403, "Schema " + parts[2] + " not found"}
		}
		return schemaBody{Schema: r.schemas[id-1], SchemaType: r.types[id-1]}, nil
	case req.Method == http.MethodGet && len(parts) == 1 && parts[0] == "config":
		return map[string]string{"compatibilityLevel": r.compat}, nil
	case req.Method == http.MethodGet && len(parts) == 2 && parts[0] == "config":
		if level, ok := r.subjectCompat[parts[1]]; ok {
			return map[string]string{"compatibilityLevel": level}, nil
		}
		if req.URL.Query().Get("defaultToGlobal") == "true" {
			return map[string]string{"compatibilityLevel": r.compat}, nil
		}
		return nil, &apiError{http.StatusNotFound, 40408, fmt.Sprintf("Subject '%s' does not have subject-level compatibility configured", parts[1])}
	}
	return nil, &apiError{http.StatusNotFound, 404, "HTTP 404 Not Found"}
}

// readSchema reads a schema and its type, "" for Avro.
func readSchema(req *http.Request) (string, string, error) {
	var b schemaBody
	if err := json.NewDecoder(req.Body).Decode(&b); err != nil {
		return "", "", &apiError{http.StatusBadRequest, 400, "Unrecognized field or malformed JSON: " + err.Error()}
	}
	switch b.SchemaType {
	case "AVRO":
		b.SchemaType = ""
	case "", "JSON", "PROTOBUF":
	default:
		return "", "", &apiError{http.StatusUnprocessableEntity, 42201, "Invalid schema type " + b.SchemaType}
	}
	if b.SchemaType != "PROTOBUF" && !json.Valid([]byte(b.Schema)) {
		return "", "", &apiError{http.StatusUnprocessableEntity, 42201, "Either the input schema or one its references is invalid"}
	}
	return b.Schema, b.SchemaType, nil
}

func (r *Registry) id(schema, typ string) (int, bool) {
	for i, s := range r.schemas {
		if s == schema && r.types[i] == typ {
			return i + 1, true
		}
	}
	return 0, false
}

func (r *Registry) register(req *http.Request, subject string) (any, error) {
	schema, typ, err := readSchema(req)
	if err != nil {
		return nil, err
	}
	id, known := r.id(schema, typ)
	if known && slices.Contains(r.subjects[subject], id) {
		return map[string]int{"id": id}, nil
	}
	if details, ok := r.reject[subject]; ok && len(r.subjects[subject]) > 0 {
		return nil, &apiError{http.StatusConflict, 409, fmt.Sprintf("Schema being registered is incompatible with an earlier schema for subject %q, details: [%s]", subject, details)}
	}
	if !known {
		r.schemas = append(r.schemas, schema)
		r.types = append(r.types, typ)
		id = len(r.schemas)
	}
	r.subjects[subject] = append(r.subjects[subject], id)
	return map[string]int{"id": id}, nil
}

func (r *Registry) lookup(req *http.Request, subject string) (any, error) {
	schema, typ, err := readSchema(req)
	if err != nil {
		return nil, err
	}
	ids, ok := r.subjects[subject]
	if !ok {
		return nil, &apiError{http.StatusNotFound, 40401, fmt.Sprintf("Subject '%s' not found.", subject)}
	}
	for v, id := range ids {
		if r.schemas[id-1] == schema && r.types[id-1] == typ {
			return subjectSchema{Subject: subject, ID: id, Version: v + 1, SchemaType: typ, Schema: schema}, nil
		}
	}
	return nil, &apiError{http.StatusNotFound, 40403, "Schema not found"}
}

func (r *Registry) version(subject, version string) (any, error) {
	ids, ok := r.subjects[subject]
	if !ok {
		return nil, &apiError{http.StatusNotFound, 40401, fmt.Sprintf("Subject '%s' not found.", subject)}
	}
	v := len(ids)
	if version != "latest" && version != "-1" {
		n, err := strconv.Atoi(version)
		if err != nil || n < 1 || n > len(ids) {
			return nil, &apiError{http.StatusNotFound, 40402, fmt.Sprintf("Version %s not found.", version)}
		}
		v = n
	}
	id := ids[v-1]
	return subjectSchema{Subject: subject, ID: id, Version: v, SchemaType: r.types[id-1], Schema: r.schemas[id-1]}, nil
}

// SetCompatibility sets subject's own compatibility level.
func (r *Registry) SetCompatibility(subject, level string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.subjectCompat[subject] = level
}
