package peerauth

import "strings"

// Basic is a user name and password (Kafka's SASL PLAIN and SCRAM, NATS's
// auth.basic), embedded under the adapter's prefix: <prefix>_USER and
// <prefix>_PASSWORD.
type Basic struct {
	User     string `envconfig:"USER" desc:"user name, with {PREFIX}_PASSWORD; white space around it is trimmed, as Numaflow trims a Secret's value"`
	Password string `envconfig:"PASSWORD" desc:"password of {PREFIX}_USER (trimmed)"`
}

// Trimmed returns the user and password without the white space around
// them, as numaflow-core reads a Secret's value: a Secret made from a file
// often ends in a line break.
func (b Basic) Trimmed() (user, password string) {
	return strings.TrimSpace(b.User), strings.TrimSpace(b.Password)
}
