module inrun.dev/sdk

go 1.25
