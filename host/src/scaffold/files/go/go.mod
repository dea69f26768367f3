module @NAME@

go 1.25

require inrun.dev/sdk v0.0.0

// The Go SDK, copied into inrun-sdk/ by `inrun plugin new`.
replace inrun.dev/sdk => ./inrun-sdk
