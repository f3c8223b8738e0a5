module github.com/infokv/infokv/bindings/go

go 1.19
