#!/bin/sh
# Oracle: the hidden relation is y = 2x + 3.
echo 27 > /app/answer.txt
