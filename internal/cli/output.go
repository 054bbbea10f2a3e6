package cli

import (
	"encoding/json"
	"fmt"
	"io"

	"sigs.k8s.io/yaml"
)

// ValidateOutput is the JSON and YAML output of validate (and of pools).
type ValidateOutput struct {
	// Pools sorted by driver and pool.
	Pools []PoolEntry `json:"pools"`
}

// writeStructured writes v as indented JSON or as YAML with the same keys.
func writeStructured(w io.Writer, format string, v any) error {
	switch format {
	case outputJSON:
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("encode JSON: %w", err)
		}
		data = append(data, '\n')
		_, err = w.Write(data)
		return err
	case outputYAML:
		data, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode YAML: %w", err)
		}
		_, err = w.Write(data)
		return err
	}
	return fmt.Errorf("unknown output format %q", format)
}
