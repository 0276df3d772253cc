module github.com/extauthz/extauthz/bench/otter

go 1.26.0

require github.com/extauthz/extauthz v0.0.0

require github.com/maypok86/otter/v2 v2.4.0

replace github.com/extauthz/extauthz => ../..
