module github.com/monovertex/monovertex/hack/goaws

go 1.26.8

require (
	github.com/Admiral-Piett/goaws v0.4.5
	github.com/sirupsen/logrus v1.9.0
)

require (
	github.com/ghodss/yaml v1.0.0 // indirect
	github.com/gorilla/mux v1.8.0 // indirect
	github.com/kr/text v0.2.0 // indirect
	golang.org/x/sys v0.5.0 // indirect
	gopkg.in/yaml.v2 v2.4.0 // indirect
)
