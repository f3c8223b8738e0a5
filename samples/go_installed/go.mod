module example.com/infokv-installed-sample

go 1.19

require github.com/infokv/infokv/bindings/go v0.1.0
