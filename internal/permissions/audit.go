package permissions

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Request is one request of the audited user, as the API server's audit
// log records it when the response is complete (or, for a watch, when it
// started: a watch that is still open at the end has no later event).
type Request struct {
	Verb, Group, Resource, Subresource, Namespace, Name string
	// Code is the response's HTTP status.
	Code int
	// Allowed: the authorizer allowed it (whatever admission said).
	Allowed bool
	// DryRun: a server-side dry run (it stores nothing).
	DryRun bool
	// WatchList: a watch that starts with the current objects
	// (sendInitialEvents), an informer's list where the API server
	// serves one.
	WatchList bool
	// Received and Done are when the API server got the request and when
	// this stage of it was logged.
	Received, Done time.Time
	// Message is the response status's message (a refusal's reason).
	Message string
	// UserAgent is the client's User-Agent header: the operator names its
	// process in it (operator.UserAgent), which tells apart the replicas
	// of one ServiceAccount.
	UserAgent string
}

// Verbs are the RBAC verbs the request needed: its own, and
//   - list for a watch-list: an informer's initial list, which the API
//     server serves as a watch where it can (and authorizes as one) and
//     as a list elsewhere (older releases, the feature off);
//   - create for a patch that created its object (201): a server-side
//     apply of a new object, which the API server authorizes as a patch and
//     a create.
func (r Request) Verbs() []string {
	v := []string{r.Verb}
	if r.WatchList {
		v = append(v, "list")
	}
	if r.Verb == "patch" && r.Code == 201 {
		v = append(v, "create")
	}
	return v
}

// GroupResource returns "group/resource[/subresource]" ("" group: core).
func (r Request) GroupResource() string {
	res := r.Resource
	if r.Subresource != "" {
		res += "/" + r.Subresource
	}
	return r.Group + "/" + res
}

// auditEvent is the part of an audit.k8s.io/v1 Event the check reads.
type auditEvent struct {
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	RequestURI string `json:"requestURI"`
	UserAgent  string `json:"userAgent"`
	Verb       string `json:"verb"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ImpersonatedUser *struct {
		Username string `json:"username"`
	} `json:"impersonatedUser"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"responseStatus"`
	RequestReceivedTimestamp time.Time         `json:"requestReceivedTimestamp"`
	StageTimestamp           time.Time         `json:"stageTimestamp"`
	Annotations              map[string]string `json:"annotations"`
}

// ParseAudit reads an audit log (one JSON event per line) and returns the
// resource requests of username, one per request: the ResponseComplete
// event, or the ResponseStarted one of a request that never completed (a
// watch still open). Requests of others, and requests made by someone
// impersonating username (tests do, to check the admission policies), are
// left out. A line that is not an audit event is an error naming the line.
func ParseAudit(r io.Reader, username string) ([]Request, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	byID := map[string]int{}
	var out []Request
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var ev auditEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			return nil, fmt.Errorf("audit log line %d: %w", n, err)
		}
		if ev.User.Username != username || ev.ImpersonatedUser != nil || ev.ObjectRef == nil {
			continue
		}
		if ev.Stage != "ResponseComplete" && ev.Stage != "ResponseStarted" {
			continue
		}
		req := Request{
			Verb: ev.Verb, Group: ev.ObjectRef.APIGroup, Resource: ev.ObjectRef.Resource, Subresource: ev.ObjectRef.Subresource,
			Namespace: ev.ObjectRef.Namespace, Name: ev.ObjectRef.Name,
			Allowed:   ev.Annotations["authorization.k8s.io/decision"] == "allow",
			DryRun:    strings.Contains(ev.RequestURI, "dryRun=All"),
			WatchList: ev.Verb == "watch" && strings.Contains(ev.RequestURI, "sendInitialEvents=true"),
			Received:  ev.RequestReceivedTimestamp, Done: ev.StageTimestamp,
			UserAgent: ev.UserAgent,
		}
		if ev.ResponseStatus != nil {
			req.Code, req.Message = ev.ResponseStatus.Code, ev.ResponseStatus.Message
		}
		if i, seen := byID[ev.AuditID]; seen {
			if ev.Stage == "ResponseComplete" {
				out[i] = req
			}
			continue
		}
		byID[ev.AuditID] = len(out)
		out = append(out, req)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	return out, nil
}
