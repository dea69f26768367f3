module inrun.dev/plugins/reporter

go 1.25

require inrun.dev/sdk v0.0.0

replace inrun.dev/sdk => ../../../sdk/go
