# R CMD check runs this file; tests needing Python skip when kerasdist (Python) is missing.
library(testthat)
library(kerasdist)

test_check("kerasdist")
