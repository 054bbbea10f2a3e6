package cluster

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// writeAuditPolicy writes the audit policy of Options.AuditLog into the
// cluster's folder and returns its path: the metadata of every request of
// Options.AuditUsers (who did what to which object, the authorization
// decision and the response code; no bodies), nothing of anyone else's.
func (c *Cluster) writeAuditPolicy() (string, error) {
	if len(c.opts.AuditUsers) == 0 {
		return "", fmt.Errorf("AuditLog %s without AuditUsers: the log would record nothing", c.opts.AuditLog)
	}
	policy := map[string]any{
		"apiVersion": "audit.k8s.io/v1",
		"kind":       "Policy",
		"omitStages": []string{"RequestReceived"},
		"rules": []any{
			map[string]any{"level": "Metadata", "users": c.opts.AuditUsers},
			map[string]any{"level": "None"},
		},
	}
	data, err := yaml.Marshal(policy)
	if err != nil {
		return "", fmt.Errorf("encode audit policy: %w", err)
	}
	path := filepath.Join(c.Dir, "audit-policy.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", fmt.Errorf("write audit policy: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(c.opts.AuditLog), 0o700); err != nil {
		return "", fmt.Errorf("create the audit log's folder: %w", err)
	}
	return path, nil
}
