#!/bin/sh
# Oracle: the hidden relation is y = 2x + 3.
echo 13 > /app/answer.txt
