module github.com/infokv/infokv/samples/go

go 1.19

require github.com/infokv/infokv/bindings/go v0.0.0

replace github.com/infokv/infokv/bindings/go => ../../bindings/go
