#!/bin/bash
echo yes > done
